"""The images routers run from, built locally (no registry): the Debian base, our router image, its
unpacked tree, and the rust-libp2p and py-libp2p adapters."""
