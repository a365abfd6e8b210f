#!/usr/bin/env bash
# Makes the virtualenv that runs the py-libp2p adapter (adapters/py-libp2p)
# on the process backend and in its tests, default .venv-pylibp2p, from the
# hash-pinned lock scripts/pylibp2p/requirements.lock.
#   scripts/pylibp2p-venv.sh [VENV]   install (plain pip --require-hashes)
#   scripts/pylibp2p-venv.sh --lock   refresh the lock (uv from PyPI, only for this)
# py-libp2p needs protobuf<7, so it may never share the project's .venv.
# Idempotent: a no-op when the venv already matches the lock.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
lock=scripts/pylibp2p/requirements.lock

if [ "${1:-}" = "--lock" ]; then
  tools=$(mktemp -d)
  trap 'rm -rf "$tools"' EXIT
  "$py" -m venv "$tools"
  "$tools/bin/python" -m pip install -q uv
  "$tools/bin/uv" pip compile --quiet --generate-hashes --python-version 3.11 \
    --output-file "$lock" scripts/pylibp2p/requirements.in
  echo "pylibp2p-venv: wrote $lock" >&2
  exit 0
fi

venv=${1:-.venv-pylibp2p}
stamp="$venv/.installed"
if [ -f "$stamp" ] && [ ! "$lock" -nt "$stamp" ]; then
  exit 0
fi
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --require-hashes --no-deps -r "$lock"
"$venv/bin/python" -c "import libp2p, google.protobuf"
touch "$stamp"
