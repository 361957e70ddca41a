"""`kquota pipeline` end to end on a real Spark standalone cluster (master + two workers on
loopback) and on a real Spark Connect server, both from the pyspark package: the results equal
local mode's. Executors run this interpreter (one machine: ``PYSPARK_PYTHON``); the pipeline
guide (docs/guides/pipeline.md) documents ``spark.archives`` with a packed virtual environment
for real clusters."""

import subprocess
import sys

import pandas as pd
import pytest

from kquota.config_file import dump_quota_config, load_quota_config, quota_config_document
from kquota.pipeline.generate import generate
from kquota.pipeline.schema import read_requests
from kquota.pipeline.simulate import simulate
from spark_cluster import Procs, env, start_connect_server, start_standalone

pytestmark = pytest.mark.heavy

ROWS = 20_000
GEN = ["--rows", str(ROWS), "--seed", "7", "--brokers", "3", "--users", "12", "--duration-s", "60"]
QUOTAS = [
    ({"user": None}, {"producer_byte_rate": 40_000, "consumer_byte_rate": 80_000, "request_percentage": 5}),
    ({"user": "user-000"}, {"producer_byte_rate": 200_000}),
]


@pytest.fixture(scope="module")
def local_run(spark, tmp_path_factory):
    """The same commands in local mode (the shared session): the log and simulate's output."""
    base = tmp_path_factory.mktemp("local")
    quotas = base / "quotas.json"
    dump_quota_config(QUOTAS, quotas)
    log = str(base / "log")
    generate(spark, ROWS, log, seed=7, brokers=3, users=12, duration_s=60)
    simulate(spark, read_requests(spark, log), quota_config_document(load_quota_config(quotas)), str(base / "sim"))
    return base


def kquota_cli(*args, timeout=300):
    r = subprocess.run([sys.executable, "-m", "kquota", "pipeline", *args], env=env(), capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, f"kquota pipeline {args[0]} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def same_results(local, other):
    key = ["broker", "ts_ms", "user", "client_id", "quota_type", "value"]
    for sub in ("log", "sim/requests"):
        a = pd.read_parquet(local / sub)
        b = pd.read_parquet(other / sub)
        assert len(a) == ROWS
        pd.testing.assert_frame_equal(a.sort_values(key).reset_index(drop=True),
                                      b.sort_values(key).reset_index(drop=True))
    sim = pd.read_parquet(local / "sim" / "requests")
    assert (sim.throttle_ms > 0).sum() > 100
    pd.testing.assert_frame_equal(pd.read_parquet(local / "sim" / "summary"),
                                  pd.read_parquet(other / "sim" / "summary"))


def run_pipeline(out, *where):
    kquota_cli("generate", *GEN, "--out", str(out / "log"), *where)
    text = kquota_cli("simulate", "--input", str(out / "log"), "--quotas", str(out / "quotas.json"),
                      "--out", str(out / "sim"), *where)
    assert "[simulate] done" in text and "no bad rows" in text


def test_standalone_cluster_equals_local_mode(local_run, tmp_path):
    procs = Procs(str(tmp_path))
    try:
        master = start_standalone(procs, workers=2)
        dump_quota_config(QUOTAS, tmp_path / "quotas.json")
        run_pipeline(tmp_path, "--master", master, "--conf", "spark.executor.memory=512m",
                     "--conf", "spark.cores.max=2")
        # Both workers ran executors for the application.
        assert all(any((tmp_path / f"work{i}").iterdir()) for i in range(2))
    finally:
        procs.stop()
    same_results(local_run, tmp_path)


def test_spark_connect_equals_local_mode(local_run, tmp_path):
    procs = Procs(str(tmp_path))
    try:
        remote = start_connect_server(procs)
        dump_quota_config(QUOTAS, tmp_path / "quotas.json")
        run_pipeline(tmp_path, "--remote", remote)
    finally:
        procs.stop()
    same_results(local_run, tmp_path)
