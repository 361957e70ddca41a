"""Real Spark processes on loopback for tests: a standalone master with workers, and a Spark
Connect server, all started from the pyspark package (``bin/spark-class``,
``sbin/start-connect-server.sh``). Each runs in its own process group, stopped as a group.

Without Java or when a process does not come up, tests skip — or fail with ``CI=true``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest
from waiting import free_port, wait_until

CI = os.environ.get("CI", "").lower() == "true"


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def unavailable(why: str) -> None:
    (pytest.fail if CI else pytest.skip)(why)


def env() -> dict:
    e = dict(os.environ)
    e.update(SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1", SPARK_MASTER_HOST="127.0.0.1",
             PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
             SPARK_DAEMON_MEMORY="256m", SPARK_NO_DAEMONIZE="1")
    return e


class Procs:
    """Processes started for a test, each in its own session (process group)."""

    def __init__(self, logdir: str) -> None:
        self.logdir = logdir
        self.procs: list = []

    def start(self, name: str, cmd: list, extra_env: dict | None = None) -> subprocess.Popen:
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            unavailable("no Java runtime for Spark")
        log = open(os.path.join(self.logdir, f"{name}.log"), "wb")
        p = subprocess.Popen(cmd, env={**env(), **(extra_env or {})}, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True, cwd=self.logdir)
        self.procs.append((name, p, log))
        return p

    def log_tail(self, name: str, n: int = 30) -> str:
        with open(os.path.join(self.logdir, f"{name}.log"), errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def stop(self) -> None:
        for _name, p, log in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
            log.close()
        self.procs.clear()


def wait_for_spark(check, timeout: float, what: str, procs: Procs, name: str) -> None:
    """Waits until ``check()`` is true (an OSError counts as not yet); Spark unavailable if one of
    ``procs`` exits first or ``timeout`` seconds pass (``name``: whose log to show then)."""
    def ready() -> bool:
        for n, p, _ in procs.procs:
            if p.poll() is not None:
                unavailable(f"{n} exited ({p.returncode}) before {what}:\n{procs.log_tail(n)}")
        try:
            return bool(check())
        except OSError:
            return False

    if not wait_until(ready, timeout, 0.5):
        unavailable(f"timed out waiting for {what}:\n{procs.log_tail(name)}")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_standalone(procs: Procs, workers: int = 2, worker_memory: str = "768m") -> str:
    """A master and ``workers`` one-core workers; returns the master URL once all registered."""
    port, ui = free_port(), free_port()
    cls = os.path.join(spark_home(), "bin", "spark-class")
    procs.start("master", [cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                           "--port", str(port), "--webui-port", str(ui)])
    url = f"spark://127.0.0.1:{port}"
    wait_for_spark(lambda: port_open(port), 90, "the master", procs, "master")
    for i in range(workers):
        work = os.path.join(procs.logdir, f"work{i}")
        os.makedirs(work, exist_ok=True)
        procs.start(f"worker{i}", [cls, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                                   "--cores", "1", "--memory", worker_memory, "--webui-port", str(free_port()),
                                   "--work-dir", work])

    def registered() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
            return json.load(r).get("aliveworkers", 0) >= workers

    wait_for_spark(registered, 120, f"{workers} workers to register", procs, "master")
    return url


def start_connect_server(procs: Procs) -> str:
    """A Spark Connect server (``local[2]``) from the pyspark package; returns ``sc://...``."""
    port = free_port()
    script = os.path.join(spark_home(), "sbin", "start-connect-server.sh")
    procs.start("connect", ["bash", script, "--master", "local[2]", "--driver-memory", "768m",
                            "--conf", f"spark.connect.grpc.binding.port={port}",
                            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                            "--conf", "spark.ui.enabled=false",
                            "--conf", "spark.sql.shuffle.partitions=2"],
                extra_env={"SPARK_LOG_DIR": procs.logdir, "SPARK_PID_DIR": procs.logdir,
                           "SPARK_DAEMON_MEMORY": "768m"})
    wait_for_spark(lambda: port_open(port), 150, "the Spark Connect server", procs, "connect")
    return f"sc://127.0.0.1:{port}"
