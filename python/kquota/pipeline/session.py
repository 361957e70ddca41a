"""The Spark session every pipeline command runs in, set up for a fresh machine."""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

DEFAULT_MASTER = "local[*]"
#: Quiet JVM logging (errors only), shipped with the package.
LOG4J_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")


def prepare_environment() -> None:
    """What a fresh machine needs before the JVM starts: Python workers run this interpreter
    (so they import the same kquota), the driver binds to loopback when the host name does not
    resolve, and Spark's console logging stays quiet."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")


def get_spark(master: Optional[str] = None, app_name: str = "kquota", remote: Optional[str] = None,
              **conf: str) -> Any:
    """Returns the active Spark session, or starts one on ``master`` (default ``local[*]``), or,
    with ``remote`` (``sc://host:port``), connects to a Spark Connect server. ``conf``: Spark
    settings (on Spark Connect only runtime SQL settings can be set)."""
    prepare_environment()
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:  # pragma: no cover - depends on the installation
        raise RuntimeError(
            "the kquota pipeline needs PySpark: python3 -m pip install 'kquota[pipeline]'"
        ) from e
    if remote:
        return _connect(remote, conf)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = (
        SparkSession.builder.master(master or DEFAULT_MASTER)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}")
    )
    # Spark's default of 200 shuffle partitions makes hundreds of tiny tasks (each with its
    # Python worker round trip) on a small machine; a few per core is right for local masters.
    local_cores = _local_cores(master or DEFAULT_MASTER)
    if local_cores is not None and "spark.sql.shuffle.partitions" not in conf:
        builder = builder.config("spark.sql.shuffle.partitions", str(max(2, 2 * local_cores)))
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("FATAL")
    return spark


def _connect(remote: str, conf: dict) -> Any:
    """A Spark Connect session (no JVM in this process; the server runs the Python tasks)."""
    from pyspark.sql import SparkSession

    if not remote.startswith("sc://"):
        raise ValueError(f"--remote must be a Spark Connect URL sc://host:port, not {remote!r}")
    try:
        import google.rpc  # noqa: F401  (the Connect client's dependencies)
        import grpc  # noqa: F401
    except ImportError as e:
        raise RuntimeError(
            "Spark Connect needs the client dependencies: python3 -m pip install 'kquota[pipeline]'"
        ) from e
    builder = SparkSession.builder.remote(remote)
    for k, v in {"spark.sql.execution.arrow.pyspark.enabled": "true", "spark.sql.session.timeZone": "UTC",
                 **conf}.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def parallelism(spark: Any) -> int:
    """Default parallelism of a classic session; on Spark Connect (no SparkContext), the
    session's shuffle partitions."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - Connect sessions have no SparkContext
        return int(spark.conf.get("spark.sql.shuffle.partitions", "4"))


def _local_cores(master: str) -> Optional[int]:
    """Cores of a ``local``, ``local[n]`` or ``local[*]`` master; ``None`` for a cluster."""
    m = master.strip()
    if m == "local":
        return 1
    if m.startswith("local[") and m.endswith("]"):
        inner = m[6:-1].split(",")[0]
        return os.cpu_count() or 2 if inner == "*" else max(1, int(inner)) if inner.isdigit() else None
    return None
