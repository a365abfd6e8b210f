"""One Spark session per process, quiet and quick to start.

Two kinds of session. A Spark Connect session (`--spark-remote sc://...` or
$SPARK_REMOTE, as Spark users expect; `testbed spark start` runs a local
server) costs a gRPC channel, not a JVM: the warm path. A classic session
starts its own JVM; its master comes from, in order: the caller
(`--spark-master`), $SPARK_MASTER, spark-defaults.conf (`spark.master`), else
local[*]. Our own defaults (UI off, few shuffle partitions, driver memory)
never override a value set in spark-defaults.conf, so a cluster's settings win.

`start_in_background` begins a classic session's JVM start in a thread, so
that `testbed run` can hide it behind the experiment; `get_spark` then waits
for that start instead of beginning another.

A classic session on a local master keeps its files (shuffle blocks,
PySpark's hand-over files, the JVM's temporary files) in a directory of its
own, and when the process exits its JVM is ended at once and that directory
removed: left to itself, the JVM shuts down after we have gone (about 0.6 s
here, most of it Spark's shutdown hooks), still holding our stdout and
stderr, so that a caller reading them (a script, CI, `| jq`) waits for it.
By then every result is written: Spark computes, the driver writes.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
import warnings
from pathlib import Path

from node.errors import BackendUnavailable

# PySpark warns that it does not yet fully support pandas 3 (the version the
# lock pins); the analysis' results on it are what its tests check. Silenced
# here, for every session (the one `start_in_background` starts included: it
# printed the warning in the middle of `testbed run`'s progress).
warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")

_LOG4J_TEXT = """\
# Spark's log output while the analysis runs: errors only, on stderr.
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.nativeloader.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativeloader.level = off
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""


def _log4j_file() -> Path:
    path = Path(tempfile.gettempdir()) / f"gossip-testbed-log4j2-{os.getuid()}.properties"
    if not path.is_file() or path.read_text() != _LOG4J_TEXT:
        path.write_text(_LOG4J_TEXT)
    return path


def _spark_defaults() -> dict[str, str]:
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        home = os.environ.get("SPARK_HOME")
        if not home:
            try:
                import pyspark

                home = str(Path(pyspark.__file__).parent)
            except ImportError:  # pragma: no cover
                return {}
        conf_dir = str(Path(home) / "conf")
    path = Path(conf_dir) / "spark-defaults.conf"
    out: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text(errors="replace").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) == 2:
                out[parts[0]] = parts[1].strip()
    return out


def java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return True
    return shutil.which("java") is not None


def _driver_memory() -> str:
    """A quarter of the machine, between 1 and 8 GiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover
        total = 8 << 30
    gib = max(1, min(8, total // (4 << 30)))
    return f"{gib}g"


# For small inputs (tests, quick runs) a JVM that only uses the C1 compiler and
# the serial collector starts and warms up several seconds faster.
SMALL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def session_conf(master: str, small: bool) -> dict[str, str]:
    """Our defaults for a session (or a Connect server) on `master`; values
    set in spark-defaults.conf are left out so that they win."""
    defaults = _spark_defaults()
    cores = os.cpu_count() or 2
    log4j = _log4j_file()
    ours = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(cores if small else max(2, 2 * cores)),
        "spark.default.parallelism": str(max(2, 2 * cores)),
        "spark.driver.memory": os.environ.get("TESTBED_SPARK_DRIVER_MEMORY", _driver_memory()),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}"
        + (f" {SMALL_JVM_OPTIONS}" if small else ""),
        "spark.executor.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}",
        "spark.driver.host": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1") if master.startswith("local") else "",
    }
    return {k: v for k, v in ours.items() if v and k not in defaults}


def default_master(master: str | None = None) -> str:
    return master or os.environ.get("SPARK_MASTER") or _spark_defaults().get("spark.master") or "local[*]"


_background: dict[str, threading.Thread] = {}
_background_error: list[BaseException] = []


def start_in_background(master: str | None = None, small: bool = True) -> None:
    """Begin starting a classic session in a daemon thread; the next
    `get_spark` waits for it. Does nothing without Java, or when called twice."""
    if not java_available() or "thread" in _background:
        return

    def start() -> None:
        try:
            _classic(master, small)
        except BaseException as exc:  # noqa: BLE001 - reported by the get_spark that waits for it
            _background_error.append(exc)

    t = threading.Thread(target=start, name="spark-start", daemon=True)
    _background["thread"] = t
    t.start()


def get_spark(master: str | None = None, small: bool = False, remote: str | None = None):
    """The process's SparkSession, created on first use: a Connect session
    when `remote` (or $SPARK_REMOTE) names a server, else a classic one.
    `small`: the input is small, prefer a quick JVM start over peak throughput."""
    remote = remote or os.environ.get("SPARK_REMOTE")
    if remote and not master:
        return _connect(remote)
    pending = _background.get("thread")
    if pending is not None:
        pending.join()
        if _background_error:
            raise _background_error[0]
    return _classic(master, small)


CONNECT_DEFAULT_PORT = 15002  # Spark Connect's default


def _reachable(remote: str) -> bool:
    """Whether anything listens at an sc://host[:port][/;params] URL: the
    Connect client would otherwise retry for minutes before giving up."""
    import socket
    from urllib.parse import urlsplit

    try:
        url = urlsplit(remote)
        host, port = url.hostname, url.port or CONNECT_DEFAULT_PORT
    except ValueError:
        return False
    if url.scheme != "sc" or not host:
        return False
    try:
        with socket.create_connection((host, port), timeout=3.0):
            return True
    except OSError:
        return False


def _connect(remote: str):
    from pyspark.sql import SparkSession

    if not _reachable(remote):
        raise BackendUnavailable(
            f"no Spark Connect server answers at {remote} (start one with `testbed spark start`, "
            "or check --spark-remote / $SPARK_REMOTE)"
        )
    try:
        return SparkSession.builder.remote(remote).getOrCreate()
    except Exception as exc:  # the client's dependencies missing, or a bad URL
        raise BackendUnavailable(f"could not connect to Spark Connect at {remote}: {exc}") from None


def _classic(master: str | None, small: bool):
    if not java_available():
        raise BackendUnavailable(
            "the analysis needs Java for PySpark, and no `java` was found (install a JRE 17, or set JAVA_HOME)"
        )
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    master = default_master(master)
    builder = SparkSession.builder.master(master).appName("gossip-testbed analysis")
    conf = session_conf(master, small)
    local_dir = None
    # Only where the JVM's options are ours (else its own temporary files could
    # not be moved, and a JVM ended at exit would leave them in /tmp) and no
    # one chose where Spark's files go.
    if master.startswith("local") and "spark.driver.extraJavaOptions" in conf and not (
        "spark.local.dir" in _spark_defaults() or os.environ.get("SPARK_LOCAL_DIRS")
    ):
        local_dir = tempfile.mkdtemp(prefix="gossip-testbed-spark-")
        conf["spark.local.dir"] = local_dir
        # The JVM's own temporary files (native libraries it unpacks: lz4,
        # snappy) there too, and no /tmp/hsperfdata_<user>/<pid>: a JVM
        # ended at exit would leave them in /tmp.
        conf["spark.driver.extraJavaOptions"] += f" -Djava.io.tmpdir={local_dir} -XX:-UsePerfData"
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # Java present but the JVM would not start
        if local_dir:
            shutil.rmtree(local_dir, ignore_errors=True)
        raise BackendUnavailable(f"could not start Spark ({master}): {exc}") from None
    if local_dir:
        atexit.register(_end_jvm, spark.sparkContext._gateway, local_dir)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _end_jvm(gateway, local_dir: str) -> None:
    """At exit: end the session's JVM now and remove its files (module
    comment). The JVM is ours unless PySpark was given one to join
    (PYSPARK_GATEWAY_PORT: no `proc`). The gateway is shut down first, so that
    the Java objects the interpreter frees after this send nothing to a JVM
    that is gone (py4j would log each failed send as an error)."""
    proc = getattr(gateway, "proc", None)
    if proc is not None and proc.poll() is None:
        gateway.shutdown()
        proc.kill()
        proc.wait()
    shutil.rmtree(local_dir, ignore_errors=True)


def start_seconds() -> float:
    """Seconds from no session to one that has run a job, then stopped: what a
    small analysis pays before its first metric (`testbed doctor --spark`)."""
    started = time.monotonic()
    spark = get_spark(small=True)
    spark.range(1).count()
    elapsed = time.monotonic() - started
    spark.stop()
    return elapsed


def parallelism(spark) -> int:
    """The session's default parallelism: the context's on a classic
    session; a Connect client cannot see the context, so the server's
    `spark.default.parallelism` (set by `testbed spark start`), else this host's cores."""
    try:
        return int(spark.sparkContext.defaultParallelism or 2)
    except Exception:  # noqa: BLE001 - a Connect session has no sparkContext
        value = spark.conf.get("spark.default.parallelism", None)
        return int(value) if value else (os.cpu_count() or 2)
