"""CPU the shaping proxy adds (docs/kernel-shaping.md, "Foreign routers without
netem"): a foreign-like container (the echo server of tests/test_docker_proxy.py)
behind the proxy sidecar streams BYTES to a peer, then exchanges MESSAGES
small messages with it; the sidecar's CPU time comes from its cgroup
(cpuacct.usage, v1, or cpu.stat, v2), so host load inflates wall time, not
these figures. Also the sidecar's CPU while idle for IDLE seconds.

    .venv/bin/python bench/bench_proxy_cpu.py [--mbytes 50] [--messages 2000] [--idle 10]

Needs root and Docker.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from node.config import LinkShape  # noqa: E402
from orchestrator.backends.api import BackendContext  # noqa: E402
from orchestrator.backends.docker.backend import DockerBackend  # noqa: E402
from orchestrator.shaping.proxy import ProxyShapes, shape_foreign  # noqa: E402
from orchestrator.images.router import ensure_image  # noqa: E402
from orchestrator.records.state import StateStore  # noqa: E402
from tests.docker_fixtures import sink_config, tcp_reachable, wait_for  # noqa: E402
from tests.test_docker_proxy import ECHO, PING, PORT  # noqa: E402

# exec'd in the foreign container: send N MB to ip:port, read the echo back
STREAM = r"""
import socket, sys, threading
ip, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) << 20
s = socket.create_connection((ip, port), timeout=120)
def drain():
    got = 0
    while got < n:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        got += len(chunk)
    print(got)
t = threading.Thread(target=drain); t.start()
block = b"x" * (1 << 16)
for _ in range(n >> 16):
    s.sendall(block)
t.join()
"""


def cpu_ns(container_id: str) -> int:
    v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage")
    if v1.exists():
        return int(v1.read_text())
    for v2 in (Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat"),
               Path(f"/sys/fs/cgroup/docker/{container_id}/cpu.stat")):
        if v2.exists():
            usage = dict(line.split() for line in v2.read_text().splitlines())
            return int(usage["usage_usec"]) * 1000
    raise SystemExit(f"no cgroup CPU accounting found for {container_id}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mbytes", type=int, default=50)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()
    testbed = f"bench-proxy-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp:
        backend = DockerBackend(BackendContext(testbed, Path(tmp), StateStore(Path(tmp) / "state"), options={
            "image": ensure_image(), "entrypoint": ["python3", "-c", ECHO]}))
        try:
            addresses = backend.prepare(["a", "b"])
            for node in ("a", "b"):
                backend.start(sink_config(backend, node, addresses))
                assert wait_for(lambda n=node: tcp_reachable(backend.ips[n], PORT))
            info = shape_foreign(backend._client, backend._container("a"), "a",
                                 ProxyShapes({backend.ips["b"]: LinkShape(delay_ms=1)}), image=backend.image,
                                 labels=backend.labels(), config_dir=Path(tmp) / "configs",
                                 exempt=[backend.gateway], listen_port=PORT)
            sidecar = backend._client.containers.get(info.sidecar)
            a = backend._container("a")
            results: dict[str, float] = {}

            before = cpu_ns(sidecar.id)
            time.sleep(args.idle)
            results["idle_cpu_percent"] = (cpu_ns(sidecar.id) - before) / 1e9 / args.idle * 100

            before, t = cpu_ns(sidecar.id), time.monotonic()
            res = a.exec_run(["python3", "-c", STREAM, backend.ips["b"], str(PORT), str(args.mbytes)])
            assert int(res.output.decode().split()[-1]) == args.mbytes << 20, res.output
            spent = (cpu_ns(sidecar.id) - before) / 1e9
            results["stream_cpu_s_per_mb_each_way"] = spent / args.mbytes
            results["stream_wall_s"] = time.monotonic() - t

            before = cpu_ns(sidecar.id)
            res = a.exec_run(["python3", "-c", PING, backend.ips["b"], str(PORT), str(args.messages)])
            assert len(json.loads(res.output.decode())) == args.messages, res.output
            results["cpu_ms_per_round_trip"] = (cpu_ns(sidecar.id) - before) / 1e6 / args.messages
            print(json.dumps({k: round(v, 4) for k, v in results.items()} | {
                "mbytes": args.mbytes, "messages": args.messages}, indent=1))
        finally:
            DockerBackend.cleanup(testbed, backend.store)
    return 0


if __name__ == "__main__":
    sys.exit(main())
