"""A local Spark Connect server that outlives one `testbed analyze`.

A classic PySpark session starts a JVM per process: seconds of work before the
first query. PySpark 4 ships Spark Connect: one long-lived server holds the
JVM and its warm JIT, and each `testbed analyze` talks to it over gRPC.
`testbed spark start|stop|status` manage one such server per state directory
($TESTBED_STATE_DIR); while it is up, analyses use it unless told otherwise.

The server is `spark-submit --class ...SparkConnectServer` from the pyspark
package, in its own session (process group) so that it survives the CLI and
`stop` can end it and its children together. It listens on 127.0.0.1 only.

Every analysis through the server (and its background warm-up) uses one
server-side session, named in the URL (`session_id`): a session's first
analysis pays for state the server builds per session (a 10M-event analysis
took 23 s in a new session, 17.5 s in one that had analysed before), and a
session per CLI call would linger on the server until it timed out. The
server keeps it for as long as it runs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from analysis.spark import default_master, java_available, session_conf
from node.atomic import write_atomic
from node.errors import BackendUnavailable, InputError

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STATE_FILE = "spark-connect.json"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 20.0
SESSION_TIMEOUT = "3650d"  # the shared session is never closed for idleness while the server runs


@dataclass(frozen=True)
class ConnectServer:
    pid: int
    port: int
    master: str
    log: str
    started_at: float
    session: str = ""  # the analyses' shared session id (none in a record from before it existed)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}" + (f"/;session_id={self.session}" if self.session else "")

    def to_dict(self) -> dict:
        return {**asdict(self), "url": self.url}


def _state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def recorded(state_dir: Path) -> ConnectServer | None:
    """The server this state directory started, if its process still runs."""
    path = _state_path(state_dir)
    try:
        server = ConnectServer(**{k: v for k, v in json.loads(path.read_text()).items() if k != "url"})
    except (OSError, ValueError, TypeError):
        return None
    if not pid_alive(server.pid):
        path.unlink(missing_ok=True)
        return None
    return server


def running(state_dir: Path) -> ConnectServer | None:
    """The recorded server if it also accepts connections (it is up)."""
    server = recorded(state_dir)
    return server if server is not None and _listening(server.port) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def start(state_dir: Path, port: int | None = None, master: str | None = None, on_wait=None) -> ConnectServer:
    """Start the server (or return the one already up) and wait until it
    accepts connections. `on_wait(seconds_elapsed)` is called while waiting."""
    existing = recorded(state_dir)
    if existing is not None:
        return existing
    if not java_available():
        raise BackendUnavailable("a Spark Connect server needs Java, and no `java` was found (install a JRE 17)")
    if port is not None and not 0 < port < 65536:
        raise InputError(f"--port {port}: not a TCP port (1-65535)")
    port = port or _free_port()
    if _listening(port):
        raise InputError(f"--port {port}: something already listens on 127.0.0.1:{port}")
    master = default_master(master)
    home = _spark_home()
    args = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", master,
            "--name", "gossip-testbed spark connect"]
    conf = {
        **session_conf(master, small=False),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.session.manager.defaultSessionTimeout": SESSION_TIMEOUT,
    }
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    log = state_dir / "spark-connect.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, "SPARK_HOME": str(home)}, start_new_session=True,
        )
    server = ConnectServer(proc.pid, port, master, str(log), time.time(), str(uuid.uuid4()))
    write_atomic(_state_path(state_dir), json.dumps(server.to_dict()) + "\n")
    began = time.monotonic()
    while not _listening(port):
        if proc.poll() is not None:
            _state_path(state_dir).unlink(missing_ok=True)
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise BackendUnavailable(f"the Spark Connect server exited ({proc.returncode}): {' | '.join(tail)} "
                                     f"(log: {log})")
        waited = time.monotonic() - began
        if waited > START_TIMEOUT_S:
            stop(state_dir)
            raise BackendUnavailable(f"the Spark Connect server did not listen within {START_TIMEOUT_S:.0f} s "
                                     f"(log: {log})")
        if on_wait:
            on_wait(waited)
        time.sleep(0.25)
    return server


def stop(state_dir: Path) -> ConnectServer | None:
    """Stop the recorded server (its whole process group): SIGTERM, then
    SIGKILL after STOP_TIMEOUT_S. Returns it, or None when none ran."""
    server = recorded(state_dir)
    _state_path(state_dir).unlink(missing_ok=True)
    if server is None:
        return None
    for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return server
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                if os.waitpid(server.pid, os.WNOHANG)[0]:
                    return server
            except ChildProcessError:  # not our child: started by another testbed process
                if not pid_alive(server.pid):
                    return server
            time.sleep(0.1)
    return server
