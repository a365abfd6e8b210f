"""The trace vocabulary and files: go-libp2p-pubsub TraceEvents written and read, foreign routers' NDJSON
converted, and the per-heartbeat score side file."""
