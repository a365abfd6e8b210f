#!/usr/bin/env bash
# Refreshes requirements.lock, the exact host environment CI tests (every
# package with its hashes), from pyproject.toml's ranges, in one step:
#
#     scripts/lock.sh                        # add/remove what pyproject changed, keep every other pin
#     scripts/lock.sh --upgrade              # move every pin to the newest release in range
#     scripts/lock.sh --upgrade-package X    # move one
#
# uv resolves (it keeps the pins already in the output file unless told to
# upgrade); it is a tool for this script only, never a dependency of the
# project: the one on PATH, else a pinned copy in a private venv in the cache.
# ./bootstrap.sh then installs the lock with plain pip (--require-hashes).
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.9
uv=$(command -v uv || true)
if [ -z "$uv" ]; then
  tool="${XDG_CACHE_HOME:-$HOME/.cache}/gossip-testbed/uv-$UV_VERSION"
  if [ ! -x "$tool/bin/uv" ]; then
    "${PYTHON:-python3}" -m venv "$tool"
    "$tool/bin/python" -m pip install -q "uv==$UV_VERSION"
  fi
  uv="$tool/bin/uv"
fi

# pip and setuptools are locked too: the installer and the build backend that
# installs the project (bootstrap.sh builds it without isolation) are the same everywhere.
printf "pip\nsetuptools\n" | "$uv" pip compile pyproject.toml - --extra test \
  --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
  --custom-compile-command scripts/lock.sh \
  -o requirements.lock "$@"
