"""QuotaConfigWatcher: a QuotaManager follows a store (in process and across processes)."""

import json
import os
import queue
import subprocess
import sys
import threading

import pytest
from store_helpers import run_cli, store_url

from kquota import ClientQuotaEntity, QuotaManager
from kquota.config_file import quota_config_document
from kquota.stores import open_store
from kquota.watcher import QuotaConfigWatcher
from waiting import wait_until

pytestmark = pytest.mark.process

E = ClientQuotaEntity
HERE = os.path.dirname(os.path.abspath(__file__))
WAIT = 30  # seconds: a hang guard, not a timing assertion


@pytest.fixture(params=["sqlite", "zookeeper", "kafka"])
def url(request, tmp_path):
    return store_url(request.param, tmp_path, request)


def follows(qm, store, timeout=WAIT):
    """Waits until the manager's configuration equals the store's."""
    return wait_until(lambda: qm.describe_client_quotas() == store.describe(), timeout, 0.02)


def test_initial_load_then_changes_then_removals(url):
    writer = open_store(url)
    writer.alter([({"user": "a"}, {"producer_byte_rate": 100}), ({"client-id": None}, {"consumer_byte_rate": 7})])
    qm = QuotaManager()
    reader = open_store(url)
    try:
        with QuotaConfigWatcher(reader, qm) as w:
            # start() returns after the initial load
            assert qm.describe_client_quotas() == writer.describe()
            assert qm.quota_limit("PRODUCE", "a", "x") == 100.0
            writer.alter([({"user": "a"}, {"producer_byte_rate": None, "consumer_byte_rate": 5}),
                          ({"user": "b", "client-id": "c"}, {"producer_byte_rate": 9})])
            assert follows(qm, writer)
            assert qm.quota_limit("PRODUCE", "a", "x") is None
            writer.alter([({"client-id": None}, {"consumer_byte_rate": None}),
                          ({"user": "b", "client-id": "c"}, {"producer_byte_rate": None})])
            assert follows(qm, writer)
            assert qm.describe_client_quotas() == {E({"user": "a"}): {"consumer_byte_rate": 5.0}}
            assert not w.errors
    finally:
        reader.close()
        writer.close()


def test_start_removes_what_the_store_does_not_have(url):
    qm = QuotaManager()
    qm.alter_client_quotas([({"user": "stale"}, {"producer_byte_rate": 1})])
    store = open_store(url)
    store.alter([({"user": "fresh"}, {"producer_byte_rate": 2})])
    try:
        with QuotaConfigWatcher(store, qm):
            assert qm.describe_client_quotas() == {E({"user": "fresh"}): {"producer_byte_rate": 2.0}}
    finally:
        store.close()


def test_value_the_manager_rejects_is_reported_and_the_rest_applied(url):
    # request_percentage 900 is valid for a default manager (capacity 1100) but not for one
    # with 2 + 1 threads (capacity 300).
    store = open_store(url)
    qm = QuotaManager(num_io_threads=2, num_network_threads=1)
    errors = []
    try:
        with QuotaConfigWatcher(store, qm, on_error=errors.append) as w:
            n = w.applied_count
            store.alter([({"user": "a"}, {"request_percentage": 900}), ({"user": "b"}, {"producer_byte_rate": 5})])
            assert w.wait_applied(n + 1, WAIT)
            for _ in range(100):
                if E({"user": "b"}) in qm.describe_client_quotas():
                    break
                threading.Event().wait(0.02)
            assert qm.describe_client_quotas() == {E({"user": "b"}): {"producer_byte_rate": 5.0}}
            assert errors and 'user="a"' in errors[-1] and "request_percentage" in errors[-1]
    finally:
        store.close()


def test_sqlite_large_alter_resyncs(tmp_path):
    url = "sqlite:///" + str(tmp_path / "q.db")
    store = open_store(url, poll_interval=0.01)
    qm = QuotaManager()
    try:
        with QuotaConfigWatcher(store, qm) as w:
            n = w.applied_count
            store.alter([({"user": f"u{i}"}, {"producer_byte_rate": i + 1}) for i in range(1000)])
            assert w.wait_applied(n + 1, WAIT)
            assert follows(qm, store)
            assert len(qm.describe_client_quotas()) == 1000
    finally:
        store.close()


class Proc:
    """A watcher subprocess (tests/support/watcher_proc.py) and the JSON states it prints."""

    def __init__(self, url):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = os.path.join(HERE, os.pardir, "support", "watcher_proc.py")
        self.p = subprocess.Popen([sys.executable, proc, url], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_line(self, pred, timeout=WAIT):
        seen = []
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no matching line within {timeout}s; got {seen[-3:]}") from None
            if line is None:
                raise AssertionError(f"watcher exited: {seen[-3:]} {self.p.stderr.read()}")
            seen.append(line)
            if pred(line):
                return line

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=WAIT)
        except Exception:
            self.p.kill()
            self.p.wait()


def _doc(entries):
    entries = sorted(entries, key=lambda kv: json.dumps(ClientQuotaEntity(kv[0]).entries, sort_keys=True))
    return json.dumps(quota_config_document(entries), sort_keys=True)


def test_two_watcher_processes_converge_after_cli_alters(url):
    store = open_store(url)
    store.alter([({"user": "old"}, {"producer_byte_rate": 1})])
    procs = [Proc(url), Proc(url)]
    try:
        for p in procs:
            p.wait_line(lambda line: line == "ready")
        r = run_cli("--store", url, "--alter", "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048",
                    "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-default")
        assert r.returncode == 0, r.stderr
        r = run_cli("--store", url, "--alter", "--delete-config", "producer_byte_rate", "--user", "old")
        assert r.returncode == 0, r.stderr
        expected = _doc([({"user": "alice", "client-id": None},
                          {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0})])
        for p in procs:
            p.wait_line(lambda line: line == expected)
        # and a third process' view (the store itself) is the same
        assert _doc(store.describe().items()) == expected
    finally:
        for p in procs:
            p.close()
        store.close()
