"""What the testbed touches on the host itself: processes by pid, its own iptables rules, room in the
neighbour table."""
