"""The virtual-time simulator: protocol engines in one process on a virtual clock, with the link model's
latencies, and its trace output."""
