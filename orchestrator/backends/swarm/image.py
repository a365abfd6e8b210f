"""Getting the router image onto every swarm node. Images are built locally
(orchestrator/images/router.py) and a swarm node only runs what its own engine has,
so there are two ways:

- `distribute`: `docker save` here, `docker load` through each other node's
  engine (TESTBED_SWARM_ENGINES or --engine URLs), streamed, no registry.
  The tag stays the content-hash tag, so the services name the same image
  everywhere.
- `push`: tag the image REGISTRY/gossip-testbed/node:<hash> and push it; the
  swarm backend then runs that reference (TESTBED_SWARM_IMAGE), and each
  node's engine pulls it.

On a single-node swarm neither is needed: the local image is used.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import InputError, TestbedError
from orchestrator.backends.swarm.engines import connect, engine_urls

CHUNK = 1 << 20


@dataclass(frozen=True)
class Delivery:
    engine: str
    image: str
    ok: bool
    detail: str


def distribute(image: str, client: Any, urls: Sequence[str] = ()) -> list[Delivery]:
    """Load `image` (from `client`, the local engine) into each engine at
    `urls` (default: every TESTBED_SWARM_ENGINES entry)."""
    targets = list(urls) or list(engine_urls().values())
    if not targets:
        raise InputError("no engines to distribute to: pass --engine URL (repeatable) or set "
                         "TESTBED_SWARM_ENGINES=hostname=tcp://host:2376,...")
    local = client.images.get(image)
    out = []
    for url in targets:
        try:
            engine = connect(url)
        except Exception as exc:  # BackendUnavailable: one engine down does not stop the others
            out.append(Delivery(url, image, False, str(exc)))
            continue
        try:
            if any(i.id == local.id for i in engine.images.list(name=image.split(":")[0])):
                out.append(Delivery(url, image, True, "already there"))
                continue
            engine.api.load_image(_save(local))
            found = engine.images.get(image)
            out.append(Delivery(url, image, found.id == local.id, f"loaded {found.id[:19]}"))
        except Exception as exc:  # docker.errors.APIError, a broken stream
            out.append(Delivery(url, image, False, f"load failed: {exc}"))
        finally:
            engine.close()
    return out


def _save(image: Any) -> Iterator[bytes]:
    yield from image.save(chunk_size=CHUNK, named=True)


def push(image: str, registry: str, client: Any) -> str:
    """Tag `image` under `registry` and push it; returns the reference to
    give the swarm backend (TESTBED_SWARM_IMAGE)."""
    registry = registry.rstrip("/")
    if not registry or " " in registry:
        raise InputError(f"registry {registry!r}: expected HOST[:PORT][/PATH], e.g. registry.example:5000")
    repo, _, tag = image.rpartition(":")
    target = f"{registry}/{repo}"
    client.images.get(image).tag(target, tag)
    errors = [line.get("error") for line in client.api.push(target, tag, stream=True, decode=True)
              if isinstance(line, dict) and line.get("error")]
    if errors:
        raise TestbedError(f"push of {target}:{tag} failed: {errors[-1]}")
    return f"{target}:{tag}"
