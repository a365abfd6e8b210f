#!/usr/bin/env bash
# Regenerates node/proto/*_pb2.py from the .proto files beside them.
# Needs the test extras (grpcio-tools bundles protoc): ./bootstrap.sh does that.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
"$py" -m grpc_tools.protoc -I node/proto --python_out=node/proto node/proto/rpc.proto node/proto/trace.proto node/proto/libp2p.proto
