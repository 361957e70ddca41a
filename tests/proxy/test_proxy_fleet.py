"""``kquota proxy --quota-scope fleet`` with real proxy processes and real
clients against Apache Kafka's broker: one quota for a fleet of proxies following one ``kafka://``
store topic (and its ``.usage`` topic) on that broker.

Quota windows are short (``quota.window.num=2`` of 1 s): three windows are 6 s. Every wait is
bounded and every process is stopped. A rate is measured over a window that starts from when the
fleet has settled (each proxy's metrics show the members and the shares the split rule gives), at
the time Kafka's rule gives (:func:`clean_from`), never after a guessed sleep."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

import pytest
from proxy_support import VALUE, Meter, make_topic, produce_loop
from store_helpers import run_cli
from waiting import free_port, wait_port, wait_until

pytestmark = pytest.mark.timing

pytest.importorskip("confluent_kafka")
QUOTA = 120_000  # bytes/s for the whole fleet
WINDOWS3 = 6.0  # three quota windows of 2 s
SPAN = 2.0  # quota.window.num x quota.window.size.seconds: the samples a quota's rate covers


class Fleet:
    """Proxy processes of one fleet (one store topic) in front of the session's Kafka broker; the
    store (and the usage topic beside it) on that cluster, or on the one at ``store_hosts``."""

    def __init__(self, broker, tmp_path, scope="fleet", store_hosts=None):
        self.broker, self.scope = broker, scope
        self.topic = f"quotas-{uuid.uuid4().hex[:8]}"
        self.store_hosts = store_hosts
        self.config = self.configure(tmp_path, "fleet-test-key-" + "0123456789abcdef" * 2)
        self.procs: list[tuple[subprocess.Popen, int, int]] = []

    @staticmethod
    def configure(directory, key_text, name="broker"):
        """A --config file whose fleet key (kquota.fleet.usage.key.file) is ``key_text``."""
        key = directory / f"{name}.key"
        key.write_text(key_text + "\n")
        config = directory / f"{name}.properties"
        config.write_text(f"quota.window.num=2\nquota.window.size.seconds=1\nkquota.fleet.usage.key.file={key}\n")
        return config

    def start(self, config=None):
        port, metrics = free_port(), free_port()
        # The log goes to a file: a pipe nobody reads would block a proxy that logs a lot.
        log = self.config.parent / f"proxy-{len(self.procs)}.log"
        with open(log, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", self.broker.address, "--listen",
                 f"127.0.0.1:{port}", "--store", f"kafka://{self.store_hosts or ''}/{self.topic}", "--quota-scope", self.scope,
                 "--config", str(config or self.config), "--metrics-port", str(metrics)],
                stdout=subprocess.DEVNULL, stderr=err, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        try:
            wait_port(port, 30)
        except TimeoutError:
            proc.kill()
            proc.wait()
            raise AssertionError(log.read_text()) from None
        self.procs.append((proc, port, metrics))
        return f"127.0.0.1:{port}", metrics

    def quota(self, key, value, client="shared"):
        r = run_cli("--store", f"kafka://{self.store_hosts or self.broker.address}/{self.topic}", "--alter", "--add-config",
                    f"{key}={value}", "--entity-type", "clients", "--entity-name", client)
        assert r.returncode == 0, r.stderr

    def stop(self):
        for proc, _, _ in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _, _ in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def fleet_metric(metrics_port, name):
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    m = re.search(rf"^kafka_server_fleet_{re.escape(name)} (\S+)$", body, re.M)
    assert m, f"no {name} in the metrics"
    return float(m.group(1))


def settled(metrics_ports, size, share=None, timeout=30.0):
    """Waits until every proxy of ``metrics_ports`` sees a fleet of ``size`` and, for each port
    ``share`` maps, holds that share (min and max over its quotas, within 0.02: the split rule's
    answer, e.g. 1/3 each for three saturated members); returns when (monotonic s)."""
    share = share or {}

    def holds():
        for m in metrics_ports:
            if fleet_metric(m, "fleet_size") != size:
                return False
            if m in share and not all(abs(fleet_metric(m, f"fleet_share_{x}") - share[m]) <= 0.02 for x in ("min", "max")):
                return False
        return True

    assert wait_until(holds, timeout, 0.2), [(fleet_metric(m, "fleet_size"), fleet_metric(m, "fleet_share_max"))
                                             for m in metrics_ports]
    return time.monotonic()


def clean_from(at, fell_by):
    """When a rate window may start after the shares settled at ``at``, having fallen by the
    factor ``fell_by``: Kafka throttles a client that overshot its quota by ``(rate - quota) / quota``
    times the sample span, and the samples of the overshoot leave the span one span later, so
    ``fell_by`` spans in all (a proxy alone holds the whole quota before it sees the others: its
    share falls by the fleet's size). A share that rose needs the span alone."""
    return at + max(fell_by, 1.0) * SPAN


def measured(meters, start, seconds):
    """The aggregate rate of ``meters`` over ``seconds`` from ``start`` (a measurement window:
    returns once it has passed)."""
    time.sleep(max(0.0, start + seconds - time.monotonic()))
    return sum(m.rate(start, start + seconds) for m in meters)


def paced_loop(address, topic, client_id, meter, stop, rate):
    """Produces ``rate`` bytes/s (a light producer), counting deliveries."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": address, "client.id": client_id, "linger.ms": 5,
                  "throttle_cb": meter.throttled})

    def delivered(err, msg):
        if err is None:
            meter.add(len(VALUE))

    start, sent = time.monotonic(), 0
    while not stop.is_set():
        due = (time.monotonic() - start) * rate
        while sent < due:
            p.produce(topic, VALUE, on_delivery=delivered)
            sent += len(VALUE)
        p.poll(0.01)
    p.flush(10)


class Clients:
    """Client threads, stopped together."""

    def __init__(self):
        self.halt, self.threads, self.meters = threading.Event(), [], []

    def run(self, target, *args):
        meter = Meter()
        t = threading.Thread(target=target, args=(*args[:3], meter, self.halt, *args[3:]), daemon=True)
        t.start()
        self.threads.append(t)
        self.meters.append(meter)
        return meter

    def stop(self):
        self.halt.set()
        for t in self.threads:
            t.join(20)


@pytest.fixture
def fleet(broker, tmp_path):
    f = Fleet(broker, tmp_path)
    yield f
    f.stop()


@pytest.fixture
def clients(fleet):
    """Client threads, stopped before the fleet's proxies."""
    c = Clients()
    yield c
    c.stop()


def test_three_producers_flat_out_share_one_quota_and_survive_a_kill_and_a_join(fleet, broker, clients):
    fleet.quota("producer_byte_rate", QUOTA)
    data = make_topic(broker.address)
    members = [fleet.start() for _ in range(3)]
    started = time.monotonic()
    meters = [clients.run(produce_loop, addr, data, "shared") for addr, _ in members]
    ports = [m for _, m in members]
    at = settled(ports, 3, dict.fromkeys(ports, 1 / 3))
    assert at - started <= WINDOWS3 + 2, at - started
    steady = measured(meters, clean_from(at, 3), 30)
    print(f"3 flat out: aggregate {steady / QUOTA:.2f}x the quota")
    assert 0.85 * QUOTA <= steady <= 1.15 * QUOTA, steady / QUOTA

    # SIGKILL one proxy: the survivors take its share within 3 windows.
    fleet.procs[2][0].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    at = settled(ports[:2], 2, dict.fromkeys(ports[:2], 1 / 2))
    assert at - killed_at <= WINDOWS3, at - killed_at
    after_kill = measured(meters[:2], clean_from(at, 2 / 3), 5)
    print(f"after a kill ({at - killed_at:.1f} s to settle): aggregate {after_kill / QUOTA:.2f}x the quota")
    assert 0.85 * QUOTA <= after_kill <= 1.15 * QUOTA, after_kill / QUOTA

    # A new proxy joins: it gets its share within 3 windows.
    joined = fleet.start()
    joined_at = time.monotonic()
    newcomer = clients.run(produce_loop, joined[0], data, "shared")
    ports = ports[:2] + [joined[1]]
    at = settled(ports, 3, dict.fromkeys(ports, 1 / 3))
    assert at - joined_at <= WINDOWS3, at - joined_at
    total = measured(meters[:2] + [newcomer], clean_from(at, 3), 5)
    mine = measured([newcomer], clean_from(at, 3), 5)
    print(f"after a join ({at - joined_at:.1f} s to settle): aggregate {total / QUOTA:.2f}x, newcomer {mine / QUOTA:.2f}x")
    assert 0.85 * QUOTA <= total <= 1.15 * QUOTA, total / QUOTA
    assert mine >= 0.6 * QUOTA / 3, mine / QUOTA


def test_a_light_producer_keeps_its_demand_while_two_run_flat_out(fleet, broker, clients):
    fleet.quota("producer_byte_rate", QUOTA)
    data = make_topic(broker.address)
    members = [fleet.start() for _ in range(3)]
    light = clients.run(paced_loop, members[0][0], data, "shared", 0.2 * QUOTA)
    heavy = [clients.run(produce_loop, addr, data, "shared") for addr, _ in members[1:]]
    # Settled: the split rule sees the light member as light (its demand with headroom, less
    # than a saturated member's share).
    ports = [m for _, m in members]

    def split_unevenly():
        return fleet_metric(ports[0], "fleet_share_max") < min(fleet_metric(m, "fleet_share_min") for m in ports[1:])

    settled(ports, 3)
    assert wait_until(split_unevenly, 30, 0.2), [fleet_metric(m, "fleet_share_max") for m in ports]
    at = time.monotonic()
    total = measured([light, *heavy], clean_from(at, 3), 15)
    light_rate = measured([light], clean_from(at, 3), 15)
    print(f"uneven: aggregate {total / QUOTA:.2f}x, light {light_rate / QUOTA:.2f}x the quota")
    assert total <= 1.15 * QUOTA, total / QUOTA
    assert light_rate >= 0.9 * 0.2 * QUOTA, light_rate / QUOTA


def consume_loop(address, topic, client_id, meter, stop):
    """Reads ``topic`` from the start as fast as the proxy lets it, counting bytes."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": address, "client.id": client_id, "group.id": f"g-{uuid.uuid4().hex[:6]}",
              "enable.auto.commit": False, "fetch.max.bytes": 16384, "max.partition.fetch.bytes": 16384,
              "message.max.bytes": 16384})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    while not stop.is_set():
        for msg in c.consume(num_messages=100, timeout=0.2):
            if msg.error() is None:
                meter.add(len(msg.value() or b""))
    c.close()


def test_three_consumers_flat_out_share_one_fetch_quota(fleet, broker, clients):
    from confluent_kafka import Producer

    data = make_topic(broker.address)
    p = Producer({"bootstrap.servers": broker.address, "linger.ms": 20, "batch.size": 16384})  # small fetches
    for _ in range(4000):  # 4 MB: more than three consumers may read in the test
        p.produce(data, VALUE)
        p.poll(0)
    assert p.flush(30) == 0
    fleet.quota("consumer_byte_rate", QUOTA)
    members = [fleet.start() for _ in range(3)]
    meters = [clients.run(consume_loop, addr, data, "shared") for addr, _ in members]
    ports = [m for _, m in members]
    at = settled(ports, 3, dict.fromkeys(ports, 1 / 3))
    total = measured(meters, clean_from(at, 3), 15)
    print(f"3 consumers flat out: aggregate {total / QUOTA:.2f}x the quota")
    assert 0.85 * QUOTA <= total <= 1.15 * QUOTA, total / QUOTA


def test_a_cut_usage_path_falls_back_to_a_static_share_and_recovers(broker, tmp_path):
    """Proxy processes whose store, and so their usage topic, is on a second cluster behind a
    forwarder that is cut: the clients' brokers stay reachable; each proxy falls back to
    quota / last fleet size within three quota windows, and leaves the fallback when the path
    comes back. The second cluster is tansu, which advertises the forwarder's port: Kafka's
    shared broker advertises its own, and the store's clients would go around the cut."""
    from proxy_support import Tansu
    from test_fleet_shares import Cuttable

    fwd = free_port()
    store_broker = Tansu(advertised_port=fwd)
    path = Cuttable(store_broker.port, fwd)
    fleet = Fleet(broker, tmp_path, store_hosts=f"127.0.0.1:{fwd}")
    clients = Clients()
    try:
        fleet.quota("producer_byte_rate", QUOTA)
        members = [fleet.start() for _ in range(2)]
        topic = make_topic(broker.address)
        meters = [clients.run(produce_loop, address, topic, "shared") for address, _ in members]
        assert wait_until(lambda: all(fleet_metric(m, "fleet_size") == 2 for _, m in members), 30)
        assert all(fleet_metric(m, "fleet_fallback") == 0 for _, m in members)
        path.cut()
        cut_at = time.monotonic()
        assert wait_until(lambda: all(fleet_metric(m, "fleet_fallback") == 1 for _, m in members), 20)
        took = time.monotonic() - cut_at
        assert took <= WINDOWS3 + 1.0, took
        assert [fleet_metric(m, "fleet_share_default") for _, m in members] == [0.5, 0.5]
        fell_back = time.monotonic()
        # The clients' path is intact: each delivers again soon after the fallback. A client muted
        # just before it waits out the throttle it was last given (at most the longest any was
        # given so far, measured here), then its next request is answered: that, and the quota's
        # span for the round trip.
        longest = max((ms for meter in meters for ms in meter.throttles), default=0) / 1000
        assert wait_until(lambda: all(meter.rate(fell_back, time.monotonic()) > 0 for meter in meters),
                          longest + SPAN), (longest, [meter.throttles[-5:] for meter in meters])
        path.open = True
        assert wait_until(lambda: all(fleet_metric(m, "fleet_fallback") == 0 for _, m in members), 30)
    finally:
        clients.stop()
        fleet.stop()
        path.stop()
        store_broker.stop()


def test_proxies_with_another_key_are_no_members_and_take_no_share(fleet, tmp_path):
    """Two proxies of one store topic with the fleet's key and one with another key (a forger on
    the usage topic, or a misconfigured proxy): the two see a fleet of two, refuse every record of
    the third and count them; the third sees itself alone."""
    other = Fleet.configure(tmp_path, "another-key-entirely-" + "fedcba9876543210" * 2, name="other")
    members = [fleet.start(), fleet.start()]
    _, outsider = fleet.start(other)
    refused = 'fleet_usage_records_rejected_total{reason="signature"}'
    assert wait_until(lambda: all(fleet_metric(m, "fleet_size") == 2 and fleet_metric(m, refused) > 0
                                  for _, m in members), 30)
    assert wait_until(lambda: fleet_metric(outsider, refused) > 0, 30)
    time.sleep(WINDOWS3)  # past the silence bound: a member let in would be counted by now
    assert [fleet_metric(m, "fleet_size") for _, m in members] == [2, 2]
    assert fleet_metric(outsider, "fleet_size") == 1
