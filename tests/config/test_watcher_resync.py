"""A failed re-read is retried until it succeeds; a ZooKeeper outage (server
stopped and restarted, with and without session expiry) during a stream of alters leaves every
watcher on the store's final state; watcher errors and the sync age are metrics."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time

import pytest
from waiting import free_port, wait_call, wait_until

from kquota import QuotaManager
from kquota.stores import open_store
from kquota.stores.base import ConfigStoreError
from kquota.watcher import QuotaConfigWatcher

pytestmark = pytest.mark.process

ZK_JAR = "/usr/share/java/zookeeper.jar"


class FlakyStore:
    """A store whose re-reads fail ``failures`` times after the initial load (as a SQLite
    ``database is locked`` or a ZooKeeper ``ConnectionLoss`` would)."""

    def __init__(self, inner, failures):
        self.inner, self.failures, self.url = inner, failures, inner.url
        self.reads = 0

    def describe(self, entities=None, on_error=None):
        self.reads += 1
        if self.reads > 1 and self.failures > 0:
            self.failures -= 1
            raise ConfigStoreError("ConnectionLoss (injected)")
        return self.inner.describe(entities, on_error=on_error)

    def watch(self, on_change, on_error=None):
        return self.inner.watch(on_change, on_error=on_error)


def test_a_failed_reread_is_retried_until_applied(tmp_path):
    store = open_store("sqlite:///" + str(tmp_path / "q.db"))
    flaky = FlakyStore(store, failures=4)
    qm = QuotaManager(expiry_interval_seconds=None)
    errors = []
    w = QuotaConfigWatcher(flaky, qm, on_error=errors.append).start()
    try:
        store.alter([({"user": "alice"}, {"producer_byte_rate": 1000})])
        # Four failed re-reads, then the change lands: never dropped.
        assert wait_until(lambda: qm.describe_client_quotas() == store.describe(), 20)
        assert w.error_count == 4
        assert not w.retry_pending
        rows = {m.name: m.value for m in qm.metrics() if m.group == "ConfigWatcher"}
        assert rows["watcher-errors-total"] == 4
        assert 0 <= rows["config-sync-age-seconds"] < 20
        assert rows["watcher-retry-pending"] == 0
    finally:
        w.stop()
        store.close()
    assert not [m for m in qm.metrics() if m.group == "ConfigWatcher"]


# ---------------------------------------------------------------- a real ZooKeeper, restarted


def _answers(port):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1)
        s.sendall(b"srvr")
        ok = s.recv(64).startswith(b"Zookeeper version")
        s.close()
        return ok
    except OSError:
        return False


class RestartableZooKeeper:
    """A private ZooKeeper whose data survives a stop (scripts/zookeeper.sh wipes it)."""

    def __init__(self, port, tmp):
        self.port, self.dir, self.proc = port, tmp, None
        os.makedirs(f"{tmp}/data", exist_ok=True)
        with open(f"{tmp}/zoo.cfg", "w") as f:
            f.write(
                f"tickTime=500\ndataDir={tmp}/data\nclientPort={port}\nclientPortAddress=127.0.0.1\n"
                "maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\n"
                "minSessionTimeout=1000\nmaxSessionTimeout=4000\n"
            )

    def start(self):
        log = open(f"{self.dir}/stdout.log", "a")
        self.proc = subprocess.Popen(
            ["java", "-Xmx128m", "-Dzookeeper.jmx.log4j.disable=true", "-cp",
             f"{ZK_JAR}:/usr/share/java/slf4j-simple.jar",
             "org.apache.zookeeper.server.ZooKeeperServerMain", f"{self.dir}/zoo.cfg"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        assert wait_until(lambda: _answers(self.port), 30), open(f"{self.dir}/stdout.log").read()[-2000:]

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture
def zookeeper(tmp_path):
    if not os.path.exists(ZK_JAR) or shutil.which("java") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("zookeeperd (java + zookeeper.jar) is needed")
        pytest.skip("zookeeperd not installed")
    pytest.importorskip("kazoo")
    # A port of its own (restarted on, so outside the ephemeral range): tests run on several
    # workers at once, and a fixed port would be another worker's ZooKeeper.
    port = free_port(stable=True)
    zk = RestartableZooKeeper(port, str(tmp_path / "zk"))
    zk.start()
    yield zk
    zk.stop()


@pytest.mark.parametrize("downtime_s,outages", [(1.0, 3), (6.0, 2)], ids=["reconnect", "session-expired"])
def test_every_watcher_converges_after_a_zookeeper_restart(zookeeper, downtime_s, outages):
    url = f"zookeeper://127.0.0.1:{zookeeper.port}/kquota-restart"
    writer = open_store(url, timeout=3.0)
    stores = [open_store(url, timeout=3.0) for _ in range(3)]
    managers = [QuotaManager(expiry_interval_seconds=None) for _ in stores]
    # A slow apply keeps a re-read in flight most of the time, so the outage hits reads.
    watchers = [
        QuotaConfigWatcher(s, qm, on_error=lambda m: None, on_applied=lambda e: time.sleep(0.03)).start()
        for s, qm in zip(stores, managers)
    ]
    stop, pause, paused = threading.Event(), threading.Event(), threading.Event()

    def alters():
        i = 0
        while not stop.is_set():
            if pause.is_set():
                paused.set()
                time.sleep(0.01)
                continue
            paused.clear()
            i += 1
            entry = ({"user": f"u{i % 17}"}, {"producer_byte_rate": 1000 + i})
            try:
                writer.alter([entry])
            except ConfigStoreError:
                time.sleep(0.05)  # the server is down: the writer moves on to its next change
            time.sleep(0.005)

    t = threading.Thread(target=alters)
    t.start()
    try:
        for _ in range(outages):
            pause.clear()
            time.sleep(1.0)  # the span under test: a second of alters before each outage
            # The server dies right after the last alters, while the watchers are still
            # re-reading them; nothing is altered after the last restart, so a dropped re-read
            # would stay dropped.
            pause.set()
            assert paused.wait(5)
            zookeeper.stop()
            time.sleep(downtime_s)
            zookeeper.start()
        stop.set()
        t.join()
        # The writer's last word: the store's final state, read back once it answers.
        final = wait_call(writer.describe, 30, 0.2, retry_on=(ConfigStoreError,))
        assert len(final) == 17
        for qm in managers:
            assert wait_until(lambda qm=qm: qm.describe_client_quotas() == final, 40), (
                [len(m.describe_client_quotas()) for m in managers],
                [w.error_count for w in watchers],
            )
    finally:
        stop.set()
        t.join(60)  # an alter waits at most its store's timeout (3 s) before the loop sees stop
        for w in watchers:
            w.stop()
        for s in stores + [writer]:
            s.close()
