"""The swarm backend: one service per router on a Docker Swarm, across engines, with image
distribution, collection and teardown by labels."""
