"""Talking to a Docker engine, for the docker and swarm backends and the image builds: the client,
what their objects are named and labelled (names), and the vocabulary of their teardown (teardown)."""
