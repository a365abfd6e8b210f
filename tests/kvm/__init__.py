"""A throwaway KVM guest that runs Debian's stock kernel, so the kernel shaping
path (htb + netem per destination, as orchestrator/shaping/tc.py generates it) can be
exercised where the host kernel lacks sch_netem.

`cpio` writes initramfs archives, `guest` builds and caches the guest's base
image from the host's Debian packages, `netem` runs the shaping scenario and
measures it. `python -m tests.kvm.netem` prints the figures as a table.
"""
