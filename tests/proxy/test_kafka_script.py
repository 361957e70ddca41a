"""``scripts/kafka.sh`` itself: its one-line errors (jars not fetched, a bad option, an unknown
tool, a state directory it did not make), the client properties files ``start`` wrote working
with Apache's own tools on every listener, and Apache's perf tools through ``kquota proxy``."""

from __future__ import annotations

import os
import re
import subprocess
import uuid

import pytest
from kafka_broker import JARS_MISSING, KAFKA_SH, unavailable
from kafka_proxy import KquotaProxy

pytestmark = pytest.mark.process


def kafka_sh(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(KAFKA_SH), *argv], env=dict(os.environ, **env), capture_output=True,
                          text=True, timeout=120)


def test_missing_jars_are_one_line_naming_the_fetch_command(tmp_path):
    r = kafka_sh("start", KQUOTA_KAFKA_LIBS=str(tmp_path / "no-libs"), KQUOTA_KAFKA_DIR=str(tmp_path / "state"))
    assert r.returncode == JARS_MISSING
    assert r.stderr.count("\n") == 1 and "fetch them with: bash scripts/kafka.sh fetch" in r.stderr, r.stderr
    assert not (tmp_path / "state").exists()  # nothing started, nothing made


@pytest.mark.parametrize("argv, needle", [
    (("start", "--brokers", "2"), "--brokers must be 1 or 3, not '2'"),
    (("start", "--listen", "x"), "unknown option '--listen'"),
    (("tool", "kafka-nothing"), "unknown tool 'kafka-nothing'"),
    (("restart",), "usage:"),
])
def test_bad_arguments_are_one_line(argv, needle):
    r = kafka_sh(*argv)
    assert r.returncode != 0 and r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr


def test_a_state_directory_it_did_not_make_is_left_alone(tmp_path):
    (tmp_path / "precious").write_text("keep me")
    for command in ("start", "stop"):
        r = kafka_sh(command, KQUOTA_KAFKA_DIR=str(tmp_path))
        assert r.returncode != 0 and "not made by kafka.sh" in r.stderr, r.stderr
    assert (tmp_path / "precious").read_text() == "keep me"


def test_a_broker_not_up_by_its_deadline_shows_its_log_and_is_stopped(tmp_path):
    from waiting import free_port

    state = tmp_path / "state"
    r = kafka_sh("start", KQUOTA_KAFKA_DIR=str(state), KQUOTA_KAFKA_START_TIMEOUT="1",
                 KQUOTA_KAFKA_PORT=str(free_port()))
    if r.returncode == JARS_MISSING:
        unavailable(r.stderr.strip())
    assert r.returncode == 1
    assert "did not come up within 1s; last lines of its logs:" in r.stderr, r.stderr
    assert "--- " + str(state / "node-1") in r.stderr
    assert not state.exists()  # stopped and removed: no process keeps the directory


def test_a_port_taken_between_its_choice_and_kafkas_bind_starts_kafka_again_elsewhere(tmp_path):
    """Another start at the same time (two test runs on one machine) can take a port this start
    chose before Kafka binds it: the start runs again on other ports instead of failing."""
    import socket
    import threading

    from waiting import free_port, wait_until

    state = tmp_path / "state"
    props = state / "node-1" / "server.properties"
    taken: list[socket.socket] = []

    def take_the_controller_port() -> None:
        # The ports are written into server.properties before the node is formatted and launched.
        if wait_until(lambda: props.exists() and "controller.quorum.voters" in props.read_text(), 60, 0.01):
            port = int(re.search(r"controller\.quorum\.voters=\d+@127\.0\.0\.1:(\d+)", props.read_text()).group(1))
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            s.listen()
            taken.append(s)

    taker = threading.Thread(target=take_the_controller_port)
    taker.start()
    try:
        r = kafka_sh("start", KQUOTA_KAFKA_DIR=str(state), KQUOTA_KAFKA_PORT=str(free_port()))
        taker.join(60)
        if r.returncode == JARS_MISSING:
            unavailable(r.stderr.strip())
        assert taken, "the controller port was not taken in time"
        assert r.returncode == 0, r.stderr[-3000:]
        assert "a port was taken while Apache Kafka started; starting again (attempt 2 of 3)" in r.stderr, r.stderr
        ports = [int(p) for p in re.findall(r"^[A-Z_]+=127\.0\.0\.1:(\d+)$", r.stdout, re.M)]
        assert len(ports) == 4 and taken[0].getsockname()[1] not in ports, (r.stdout, taken)
    finally:
        kafka_sh("stop", KQUOTA_KAFKA_DIR=str(state))
        for s in taken:
            s.close()


def test_every_listener_answers_apaches_tools_with_the_written_properties(kafka_broker):
    assert set(kafka_broker.listeners) == {"PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"}
    for listener, address in kafka_broker.listeners.items():
        assert all(re.fullmatch(r"127\.0\.0\.1:\d+", a) for a in address.split(",")), address  # loopback only
        r = kafka_broker.tools("kafka-broker-api-versions", "--bootstrap-server", address, "--command-config",
                               str(kafka_broker.client_properties[listener]))
        assert r.returncode == 0 and "ApiVersions(" in r.stdout, (listener, r.stdout, r.stderr)


def test_apaches_perf_tools_through_the_proxy(kafka_broker, tmp_path):
    topic = f"kq-perf-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic)
    proxy = KquotaProxy(kafka_broker.listeners["PLAINTEXT"], tmp_path)
    try:
        produced = kafka_broker.tools("kafka-producer-perf-test", "--topic", topic, "--num-records", "2000",
                                      "--record-size", "100", "--throughput", "-1", "--producer-props",
                                      f"bootstrap.servers={proxy.address}", "acks=all")
        assert produced.returncode == 0, produced.stderr
        assert re.search(r"^2000 records sent, ", produced.stdout, re.M), produced.stdout
        consumed = kafka_broker.tools("kafka-consumer-perf-test", "--bootstrap-server", proxy.address, "--topic",
                                      topic, "--messages", "2000", "--timeout", "60000")
        assert consumed.returncode == 0, consumed.stderr
        # the data row: start, end, MB, MB/s, messages (2000), ...
        row = consumed.stdout.strip().splitlines()[-1].split(", ")
        assert int(row[4]) == 2000, consumed.stdout
    finally:
        code, err = proxy.stop()
    assert code == 0, err


def test_apaches_console_producer_through_the_proxy_over_sasl(kafka_broker, tmp_path):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    topic = f"kq-console-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic)
    proxy = KquotaProxy(f"SASL_PLAINTEXT://{kafka_broker.listeners['SASL_PLAINTEXT']}", tmp_path,
                        listen="SASL_PLAINTEXT")
    # the admin user's SCRAM-SHA-512 properties, as kafka.sh wrote them, without the broker's address
    config = tmp_path / "producer.properties"
    config.write_text("".join(line + "\n" for line in kafka_broker.client_properties["SASL_PLAINTEXT"].read_text()
                              .splitlines() if not line.startswith("bootstrap.servers=")))
    try:
        r = kafka_broker.tools("kafka-console-producer", "--bootstrap-server", proxy.address, "--topic", topic,
                               "--producer.config", str(config), input="one\ntwo\nthree\n")
        assert r.returncode == 0, r.stderr
    finally:
        code, err = proxy.stop()
    assert code == 0, err
    consumer = Consumer({**kafka_broker.admin_config(), "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[bytes] = []
    try:
        for _ in range(300):
            if len(got) == 3:
                break
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == [b"one", b"two", b"three"]
