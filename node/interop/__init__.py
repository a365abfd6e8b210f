"""Our router under libp2p test-plans' gossipsub-interop contract, and our parameters in go-libp2p-pubsub's
words."""
