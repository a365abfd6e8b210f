"""The process backend: one OS process per router on this host."""
