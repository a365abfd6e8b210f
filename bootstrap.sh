#!/usr/bin/env bash
# Sets up everything gossip-testbed needs on a fresh Debian/Ubuntu machine, idempotently:
# system packages (iproute2, debootstrap, Java for Spark, Chromium for the report test)
# when run as root, a virtualenv in .venv with exactly the versions in requirements.lock
# and the project itself, the router image when Docker answers; then `testbed doctor`
# says what this host can do.
set -euo pipefail
cd "$(dirname "$0")"

need=()
command -v ip >/dev/null || need+=(iproute2)
command -v tc >/dev/null || need+=(iproute2)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v java >/dev/null || need+=(default-jre-headless)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need+=(chromium)
# The kernel-shaping test (tests/test_kvm_netem.py) boots Debian's stock kernel in qemu.
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
dpkg-query -W -f '${db:Status-Status}' linux-image-amd64 2>/dev/null | grep -qx installed || need+=(linux-image-amd64)
dpkg-query -W -f '${db:Status-Status}' busybox-static 2>/dev/null | grep -qx installed || need+=(busybox-static)
command -v ping >/dev/null || need+=(iputils-ping)
command -v iperf3 >/dev/null || need+=(iperf3)
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
# Exactly the locked versions (requirements.lock, made by scripts/lock.sh),
# re-installed whenever the lock or pyproject.toml changes: the stamp holds
# their hash.
stamp=.venv/.installed
want=$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "bootstrap: installing requirements.lock into .venv" >&2
  .venv/bin/python -m pip install -q --require-hashes -r requirements.lock
  # What an older lock brought and this one no longer has goes, so .venv is the lock.
  names() { sed -E 's/[ =;@].*//' | tr 'A-Z_.' 'a-z--' | sort -u; }
  stale=$(comm -23 <(.venv/bin/python -m pip freeze --all --exclude-editable | names) \
                   <(grep -E '^[A-Za-z0-9]' requirements.lock | names))
  if [ -n "$stale" ]; then
    # shellcheck disable=SC2086 # one package name per word
    .venv/bin/python -m pip uninstall -q -y $stale
  fi
  .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .
  if ! problems=$(.venv/bin/python -m pip check); then
    echo "$problems" >&2
    echo "bootstrap: requirements.lock does not satisfy pyproject.toml; refresh it with scripts/lock.sh" >&2
    exit 1
  fi
  echo "$want" >"$stamp"
fi

scripts/pylibp2p-venv.sh || echo "bootstrap: could not make .venv-pylibp2p; the py-libp2p interop tests will be skipped" >&2

# The rust-libp2p adapter (adapters/rust-libp2p), built where cargo is, into
# the shared cache (orchestrator/images/rust.py), so tests and runs find it.
# Optional: without cargo or on failure set-up goes on and it is unavailable.
if command -v cargo >/dev/null; then
  .venv/bin/python -c 'from orchestrator.images.rust import build_rust_adapter; build_rust_adapter()' ||
    echo "bootstrap: could not build the rust-libp2p adapter; the rust-libp2p router is unavailable" >&2
fi

# The delay line (orchestrator/shaping/native/delayline): per-link delay, jitter and
# loss for the docker backend on hosts whose kernel has no sch_netem. No
# dependencies, so cargo builds it offline. Optional: without it the routers
# delay their own frames (orchestrator/shaping/delayline.py says what that costs).
if command -v cargo >/dev/null; then
  .venv/bin/python -c 'from orchestrator.shaping.delayline import build; build()' ||
    echo "bootstrap: could not build the delay line; on a host without netem the routers delay their own frames" >&2
fi

# The router image for the Docker backend is built here, where set-up may
# download (wheels from PyPI, a Debian base by debootstrap where no registry
# answers), so that runs never do. Content-hashed: a no-op when up to date.
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  .venv/bin/testbed image build
  # The simulator's PyPy image (orchestrator/pypy/image.py): `testbed sim
  # --pypy`, the same run in about half the time at scale. Optional.
  .venv/bin/testbed image build --pypy ||
    echo "bootstrap: could not build the simulator's PyPy image; testbed sim --pypy is unavailable" >&2
else
  echo "bootstrap: no reachable Docker daemon; the docker backend is unavailable (process and sim work)" >&2
fi

# What this host can do, and the command that fixes each missing piece. It
# informs and never fails set-up: exit 1 (the demo cannot run yet) is reported
# in its own table; anything else is said here.
status=0
.venv/bin/testbed doctor || status=$?
if [ "$status" -gt 1 ]; then
  echo "bootstrap: testbed doctor could not finish (exit $status)" >&2
fi
