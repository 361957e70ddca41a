"""The Kafka store (and ``kquota proxy --store kafka:///TOPIC``) on a secured cluster: Apache
Kafka's SSL listener (``kafka_broker``), which requires a client certificate (mutual TLS; the
admin's or the proxy's, both super users). The store's connections take Kafka client properties
(PEM and PKCS12 trust and key stores, inline PEM), read and checked as every kquota client reads
them; a bad one is one error line naming the property and the file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from proxy_support import Meter, produce_loop
from waiting import free_port, step_until, wait_port, wait_until
from store_helpers import run_cli

from kquota import ClientQuotaEntity, QuotaManager
from kquota.stores import ConfigStoreError, open_store
from kquota.watcher import QuotaConfigWatcher

pytestmark = pytest.mark.process

pytest.importorskip("confluent_kafka")
E = ClientQuotaEntity


def pem_trust(kafka_broker) -> dict[str, str]:
    """Kafka's CA (PEM), no client certificate: the SSL listener refuses these alone."""
    return {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(kafka_broker.tls.ca_pem)}


def mutual(kafka_broker, user: str = "admin") -> dict[str, str]:
    """Kafka's CA and ``user``'s certificate as a PEM keystore file (key, certificate, CA)."""
    return {**pem_trust(kafka_broker), "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(kafka_broker.tls.cert(user).keystore_pem)}


def pkcs12_keystore(kafka_broker, user: str, password: str | None = None) -> dict[str, str]:
    return {**pem_trust(kafka_broker), "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(kafka_broker.tls.cert(user).p12),
            "ssl.keystore.password": kafka_broker.tls.password if password is None else password}


def write_props(path, props: dict[str, str]) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def url(kafka_broker) -> str:
    return f"kafka://{kafka_broker.listeners['SSL']}/q-{uuid.uuid4().hex[:10]}"


def test_the_store_alters_describes_and_follows_over_ssl(kafka_broker):
    where = url(kafka_broker)
    store = open_store(where, security=mutual(kafka_broker), security_source="store.properties")
    qm = QuotaManager()
    watcher = QuotaConfigWatcher(store, qm).start()
    try:
        store.alter([({"user": "alice"}, {"producer_byte_rate": 1024.0})])
        assert store.describe() == {E({"user": "alice"}): {"producer_byte_rate": 1024.0}}
        assert wait_until(lambda: qm.quota_limit("PRODUCE", "alice", "any") == 1024.0, 30)
    finally:
        watcher.stop()
        store.close()
        qm.close()
    # Another handle with the properties inline (KIP-651) sees the same topic.
    admin = kafka_broker.tls.client
    inline = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
              "ssl.truststore.certificates": kafka_broker.tls.ca_pem.read_text(),
              "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": admin.pem.read_text(),
              "ssl.keystore.key": admin.key.read_text()}
    with open_store(where, security=inline, read_only=True) as again:
        assert again.describe() == {E({"user": "alice"}): {"producer_byte_rate": 1024.0}}


def test_mutual_tls_with_a_pkcs12_keystore(kafka_broker):
    with open_store(url(kafka_broker), security=pkcs12_keystore(kafka_broker, "admin")) as store:
        store.alter([({"client-id": "c"}, {"consumer_byte_rate": 2048.0})])
        assert store.describe() == {E({"client-id": "c"}): {"consumer_byte_rate": 2048.0}}
    # Without a client certificate the broker refuses the handshake: one line, in time.
    t0 = time.monotonic()
    with pytest.raises(ConfigStoreError) as e:
        open_store(url(kafka_broker), security=pem_trust(kafka_broker), timeout=3)
    assert "\n" not in str(e.value) and time.monotonic() - t0 < 30, e.value


def test_bad_security_properties_fail_in_one_line(pki, kafka_broker, tmp_path):
    jks = tmp_path / "ts.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")  # a JKS store's magic and version
    cases = [
        ({"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tmp_path / "no")},
         "ssl.truststore.location: cannot read"),
        ({"security.protocol": "SSL", "ssl.truststore.location": str(jks)}, "JKS keystores are not supported"),
        ({"security.protocol": "TLS"}, "security.protocol: invalid value"),
        ({**pem_trust(kafka_broker), "security.protocol": "SASL_SSL"}, "GSSAPI (Kafka's default) is not supported"),
        (pkcs12_keystore(kafka_broker, "alice", "wrong"), "ssl.keystore.password: wrong password for the PKCS12 store"),
    ]
    for props, words in cases:
        with pytest.raises(ConfigStoreError) as e:
            open_store(url(kafka_broker), security=props, security_source="store.properties", timeout=3)
        text = str(e.value)
        assert words in text and "store.properties" in text and "\n" not in text, (props, text)
    # Properties that are right but a CA that did not sign the broker's certificate (the tests'
    # own, make_pki's), and no TLS at all against a TLS port: the store cannot be opened, in one line.
    wrong_ca = {**mutual(kafka_broker), "ssl.truststore.location": str(pki.ca.pem)}
    for props in (wrong_ca, None):
        with pytest.raises(ConfigStoreError) as e:
            open_store(url(kafka_broker), security=props, timeout=3)
        assert "\n" not in str(e.value), e.value


def test_configs_cli_and_the_proxy_use_the_store_over_tls(kafka_broker, tmp_path):
    """One properties file (the proxy's PKCS12 keystore) for ``kquota configs --store``, and for
    the proxy's connections to the brokers and to its store."""
    conf = write_props(tmp_path / "client.properties", pkcs12_keystore(kafka_broker, "proxy"))
    topic = f"q-{uuid.uuid4().hex[:10]}"
    ssl_address = kafka_broker.listeners["SSL"]
    where = f"kafka://{ssl_address}/{topic}"
    r = run_cli("--store", where, "--command-config", conf, "--alter", "--add-config",
                "producer_byte_rate=40000", "--client", "paced")
    assert r.returncode == 0, r.stderr
    r = run_cli("--store", where, "--command-config", conf, "--describe", "--client", "paced")
    assert r.returncode == 0 and "producer_byte_rate=40000" in r.stdout, (r.stdout, r.stderr)
    r = run_cli("--store", where, "--describe")  # no properties: a TLS port, one line
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr

    # The proxy: TLS to the brokers (SSL://, --broker-config), the store on the same cluster
    # (kafka:///TOPIC) over the same properties, plaintext clients; the stored quota holds them.
    data_topic = f"kq-store-tls-{uuid.uuid4().hex[:10]}"
    kafka_broker.create_topic(data_topic)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", f"SSL://{ssl_address}",
         "--broker-config", conf, "--listen", f"127.0.0.1:{port}", "--store", f"kafka:///{topic}",
         "--quota-window-num", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    meter, stop = Meter(), threading.Event()
    producer = threading.Thread(target=produce_loop, args=(f"127.0.0.1:{port}", data_topic, "paced", meter, stop))
    try:
        wait_port(port, 30)
        producer.start()
        # The proxy reads the quota from the store: its first throttle says it is applied.
        assert wait_until(lambda: meter.throttles, 30), "no throttle: the stored quota was not applied"
        start = time.monotonic()
        time.sleep(5)  # the measured window
        end = time.monotonic()
    finally:
        stop.set()
        producer.join(30)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    rate = meter.rate(start, end)
    assert 0.3 * 40_000 <= rate <= 1.3 * 40_000, rate
    assert max(meter.throttles, default=0) > 0


def test_store_config_is_only_for_a_kafka_store(tmp_path):
    conf = write_props(tmp_path / "c.properties", {"security.protocol": "SSL"})
    r = subprocess.run([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", "127.0.0.1:1",
                        "--store", f"sqlite:///{tmp_path}/q.db", "--store-config", conf],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--store-config is for a kafka:// --store" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_fleet_exchanges_usage_over_tls(kafka_broker):
    from kquota.proxy.fleet import FleetCoordinator
    from kquota.stores.kafka.security import librdkafka_security

    security = librdkafka_security(pkcs12_keystore(kafka_broker, "proxy"), "store.properties")
    assert security["security.protocol"] == "ssl" and "BEGIN CERTIFICATE" in security["ssl.ca.pem"]
    assert "PRIVATE KEY" in security["ssl.key.pem"]
    qms = [QuotaManager(window_num=2), QuotaManager(window_num=2)]
    coords = []
    try:
        topic = f"q-{uuid.uuid4().hex[:10]}"
        coords = [FleetCoordinator(qm, kafka_broker.listeners["SSL"], topic, interval_s=0.3, security=security, key=b"k" * 32)
                  for qm in qms]
        step_until(coords, lambda: all(c.fleet_size == 2 for c in coords), 30, 0.3)
        assert [c.fleet_size for c in coords] == [2, 2] and not any(c.fallback for c in coords)
    finally:
        for c in coords:
            c.stop()
        for qm in qms:
            qm.close()
