#!/usr/bin/env bash
# Sets up everything gossip-testbed needs on a fresh Debian/Ubuntu machine, idempotently:
# system packages (iproute2, debootstrap, Java for Spark, Chromium for the report test)
# when run as root, a virtualenv in .venv with the project and its test extras.
set -euo pipefail
cd "$(dirname "$0")"

need=()
command -v ip >/dev/null || need+=(iproute2)
command -v tc >/dev/null || need+=(iproute2)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v java >/dev/null || need+=(default-jre-headless)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need+=(chromium)
if ((${#need[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing system packages: ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "bootstrap: not root or no apt-get; missing (some features will be skipped): ${need[*]}" >&2
  fi
fi

py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
stamp=.venv/.installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi

scripts/pylibp2p-venv.sh || echo "bootstrap: could not make .venv-pylibp2p; the py-libp2p interop tests will be skipped" >&2

# The router image for the Docker backend is built here, where set-up may
# download (wheels from PyPI, a Debian base by debootstrap where no registry
# answers), so that runs never do. Content-hashed: a no-op when up to date.
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  .venv/bin/testbed image build
else
  echo "bootstrap: no reachable Docker daemon; the docker backend is unavailable (process and sim work)" >&2
fi
