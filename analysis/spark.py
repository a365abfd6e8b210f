"""One Spark session per process, quiet and quick to start.

The master comes from, in order: the caller (`--spark-master`), $SPARK_MASTER,
spark-defaults.conf (`spark.master`), else local[*]. Our own defaults (UI off,
few shuffle partitions, driver memory) never override a value set in
spark-defaults.conf, so a cluster's settings win.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from node.errors import BackendUnavailable

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


def get_spark(master: str | None = None, small: bool = False):
    """The process's SparkSession, created on first use. `small`: the input
    is small, prefer a quick JVM start over peak throughput."""
    if not java_available():
        raise BackendUnavailable(
            "the analysis needs Java for PySpark, and no `java` was found (install a JRE 17, or set JAVA_HOME)"
        )
    import warnings

    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas.*")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    defaults = _spark_defaults()
    master = master or os.environ.get("SPARK_MASTER") or defaults.get("spark.master") or "local[*]"
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
        "spark.driver.host": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
        if master.startswith("local")
        else "",
    }
    builder = SparkSession.builder.master(master).appName("gossip-testbed analysis")
    for key, value in ours.items():
        if value and key not in defaults:
            builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # Java present but the JVM would not start
        raise BackendUnavailable(f"could not start Spark ({master}): {exc}") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start_seconds() -> float:
    """Seconds from no session to one that has run a job, then stopped: what a
    small analysis pays before its first metric (`testbed doctor --spark`)."""
    started = time.monotonic()
    spark = get_spark(small=True)
    spark.range(1).count()
    elapsed = time.monotonic() - started
    spark.stop()
    return elapsed
