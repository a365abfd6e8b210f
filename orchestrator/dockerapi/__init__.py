"""Talking to a Docker engine, for the docker and swarm backends and the image builds: the client,
the labels every object carries, and the cache directory."""
