"""Router kinds and what each node is told: the kinds (ours, rust-libp2p, py-libp2p, bare contract
images), their identities, configs, interop scripts and sybil behaviours."""
