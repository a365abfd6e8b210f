"""What goes on the wire: the pubsub RPC and its protobuf encoding, length-prefixed framing, and episub's
messages."""
