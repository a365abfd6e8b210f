"""Link shaping: the tc plans, the delay line (NFQUEUE) and its native code, and the shaping proxy in
front of routers whose container cannot be shaped in the kernel."""
