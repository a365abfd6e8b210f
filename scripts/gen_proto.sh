#!/usr/bin/env bash
# Regenerates node/proto/*_pb2.py from the .proto files beside them.
# Needs the test extras (grpcio-tools bundles protoc): ./bootstrap.sh does that.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
"$py" -m grpc_tools.protoc -I node/proto --python_out=node/proto node/proto/rpc.proto node/proto/trace.proto node/proto/libp2p.proto node/proto/episub.proto
# episub.proto imports rpc.proto: protoc writes a top-level import, the package needs its own
sed -i 's/^import rpc_pb2 as rpc__pb2$/from node.proto import rpc_pb2 as rpc__pb2/' node/proto/episub_pb2.py
