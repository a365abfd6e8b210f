"""Running a testbed on the wall clock: the controller, each node's lifecycle and state, readiness, the
workload, and the whole-testbed verbs the CLI calls."""
