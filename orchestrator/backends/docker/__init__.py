"""The Docker backend: one router per container on a private network, with its wiring, node
directories, collection and teardown."""
