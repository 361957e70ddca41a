"""The Kafka store (and ``kquota proxy --store kafka:///TOPIC``) on a secured cluster: tansu
behind stunnel4 is a real TLS broker. The store's connections take Kafka client properties
(PEM and PKCS12 trust and key stores, inline PEM, mutual TLS), read and checked as every kquota
client reads them; a bad one is one error line naming the property and the file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from proxy_support import Meter, free_port, produce_loop, wait_port
from store_helpers import run_cli, wait_until
from tls_support import PASSWORD, TlsBroker, make_tls_topic, ssl_client_config

from kquota import ClientQuotaEntity, QuotaManager
from kquota.stores import ConfigStoreError, open_store
from kquota.watcher import QuotaConfigWatcher

pytest.importorskip("confluent_kafka")
E = ClientQuotaEntity


def pem_trust(pki) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca.pem)}


def write_props(path, props: dict[str, str]) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def url(broker) -> str:
    return f"kafka://{broker.address}/q-{uuid.uuid4().hex[:10]}"


def test_the_store_alters_describes_and_follows_over_ssl(pki, tls_broker):
    where = url(tls_broker)
    store = open_store(where, security=pem_trust(pki), security_source="store.properties")
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
    inline = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
              "ssl.truststore.certificates": pki.ca.pem.read_text()}
    with open_store(where, security=inline, read_only=True) as again:
        assert again.describe() == {E({"user": "alice"}): {"producer_byte_rate": 1024.0}}


def test_mutual_tls_with_a_pkcs12_keystore(pki):
    broker = TlsBroker(pki, client_ca=pki.ca.pem)
    try:
        props = {**pem_trust(pki), "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.alice.p12),
                 "ssl.keystore.password": PASSWORD}
        with open_store(url(broker), security=props) as store:
            store.alter([({"client-id": "c"}, {"consumer_byte_rate": 2048.0})])
            assert store.describe() == {E({"client-id": "c"}): {"consumer_byte_rate": 2048.0}}
        # Without a client certificate the broker refuses the handshake: one line, in time.
        t0 = time.monotonic()
        with pytest.raises(ConfigStoreError) as e:
            open_store(url(broker), security=pem_trust(pki), timeout=3)
        assert "\n" not in str(e.value) and time.monotonic() - t0 < 30, e.value
    finally:
        broker.stop()


def test_bad_security_properties_fail_in_one_line(pki, tls_broker, tmp_path):
    jks = tmp_path / "ts.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")  # a JKS store's magic and version
    cases = [
        ({"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tmp_path / "no")},
         "ssl.truststore.location: cannot read"),
        ({"security.protocol": "SSL", "ssl.truststore.location": str(jks)}, "JKS keystores are not supported"),
        ({"security.protocol": "TLS"}, "security.protocol: invalid value"),
        ({"security.protocol": "SASL_SSL", **{k: v for k, v in pem_trust(pki).items() if k != "security.protocol"}},
         "GSSAPI (Kafka's default) is not supported"),
        ({**pem_trust(pki), "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.alice.p12),
          "ssl.keystore.password": "wrong"}, "ssl.keystore.password: wrong password for the PKCS12 store"),
    ]
    for props, words in cases:
        with pytest.raises(ConfigStoreError) as e:
            open_store(url(tls_broker), security=props, security_source="store.properties", timeout=3)
        text = str(e.value)
        assert words in text and "store.properties" in text and "\n" not in text, (props, text)
    # Properties that are right but a CA that did not sign the broker's certificate, and no TLS
    # at all against a TLS port: the store cannot be opened, in one line.
    wrong_ca = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(pki.other_ca.pem)}
    for props in (wrong_ca, None):
        with pytest.raises(ConfigStoreError) as e:
            open_store(url(tls_broker), security=props, timeout=3)
        assert "\n" not in str(e.value), e.value


def test_configs_cli_and_the_proxy_use_the_store_over_tls(pki, tls_broker, tmp_path):
    conf = write_props(tmp_path / "client.properties", pem_trust(pki))
    topic = f"q-{uuid.uuid4().hex[:10]}"
    where = f"kafka://{tls_broker.address}/{topic}"
    r = run_cli("--store", where, "--command-config", conf, "--alter", "--add-config",
                "producer_byte_rate=40000", "--client", "paced")
    assert r.returncode == 0, r.stderr
    r = run_cli("--store", where, "--command-config", conf, "--describe", "--client", "paced")
    assert r.returncode == 0 and "producer_byte_rate=40000" in r.stdout, (r.stdout, r.stderr)
    r = run_cli("--store", where, "--describe")  # no properties: a TLS port, one line
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr

    # The proxy: TLS to the brokers (SSL://, --broker-config), the store on the same cluster
    # (kafka:///TOPIC) over the same properties, plaintext clients; the stored quota holds them.
    data_topic = make_tls_topic(tls_broker.address, ssl_client_config(pki))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", f"SSL://{tls_broker.address}",
         "--broker-config", conf, "--listen", f"127.0.0.1:{port}", "--store", f"kafka:///{topic}",
         "--quota-window-num", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    meter, stop = Meter(), threading.Event()
    producer = threading.Thread(target=produce_loop, args=(f"127.0.0.1:{port}", data_topic, "paced", meter, stop))
    try:
        wait_port(port, 30)
        producer.start()
        time.sleep(8)
        end = time.monotonic()
    finally:
        stop.set()
        producer.join(30)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    rate = meter.rate(end - 5, end)
    assert 0.3 * 40_000 <= rate <= 1.3 * 40_000, rate
    assert max(meter.throttles, default=0) > 0


def test_store_config_is_only_for_a_kafka_store(tmp_path):
    conf = write_props(tmp_path / "c.properties", {"security.protocol": "SSL"})
    r = subprocess.run([sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", "127.0.0.1:1",
                        "--store", f"sqlite:///{tmp_path}/q.db", "--store-config", conf],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--store-config is for a kafka:// --store" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_fleet_exchanges_usage_over_tls(pki, tls_broker):
    from kquota.proxy.fleet import FleetCoordinator
    from kquota.stores.kafka.security import librdkafka_security

    security = librdkafka_security(pem_trust(pki), "store.properties")
    assert security["security.protocol"] == "ssl" and "BEGIN CERTIFICATE" in security["ssl.ca.pem"]
    qms = [QuotaManager(window_num=2), QuotaManager(window_num=2)]
    coords = []
    try:
        topic = f"q-{uuid.uuid4().hex[:10]}"
        coords = [FleetCoordinator(qm, tls_broker.address, topic, interval_s=0.3, security=security, key=b"k" * 32)
                  for qm in qms]
        deadline = time.monotonic() + 30
        while not all(c.fleet_size == 2 for c in coords) and time.monotonic() < deadline:
            for c in coords:
                c.step()
            time.sleep(0.3)
        assert [c.fleet_size for c in coords] == [2, 2] and not any(c.fallback for c in coords)
    finally:
        for c in coords:
            c.stop()
        for qm in qms:
            qm.close()
