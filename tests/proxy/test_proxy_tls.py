"""The proxy with TLS on both sides: its own listener with certificates the tests make
(``make_pki``), mutual TLS from the proxy to Apache Kafka's SSL listener (``kafka_broker``: the
proxy's certificate, ``User:proxy``), and real clients: confluent-kafka over SSL through the proxy
byte for byte, a user quota enforced on the principal of a client certificate, the command
line's listener and broker configuration files, the listener's certificate renewed in place.
Mutual TLS to the broker itself, and the broker refusing the proxy: test_proxy_kafka_tls.py."""

from __future__ import annotations

import pytest
import threading
import time

import kquota
from proxy_support import Meter, ProxyThread, produce_loop
from test_proxy_kafka_tls import port_of
from test_proxy_kafka_tls import upstream_props as kafka_upstream_props
from tls_support import _name, roundtrip, ssl_client_config, tls_wire
from waiting import wait_until

#: Listener properties as a broker's: the proxy's server keystore, client certificates optional.
RULES = "RULE:^CN=([^,]+),OU=([^,]+),O=kquota$/$1/,DEFAULT"


def listener_props(pki, client_auth: str = "requested") -> dict[str, str]:
    return {"ssl.keystore.location": str(pki.server.keystore_pem), "ssl.truststore.location": str(pki.ca.pem),
            "ssl.client.auth": client_auth, "ssl.principal.mapping.rules": RULES}


def upstream_props(kafka_broker) -> dict[str, str]:
    """The proxy's connections to Kafka's SSL listener: its CA, and the proxy's certificate."""
    return kafka_upstream_props(kafka_broker, kafka_broker.tls.proxy.p12)


def kafka_ssl(kafka_broker) -> tuple[str, int]:
    return "127.0.0.1", port_of(kafka_broker.listeners["SSL"])


def tls_proxy(kafka_broker, pki, qm=None, **options) -> ProxyThread:
    """A proxy listening with ``pki``'s server certificate in front of Kafka's SSL listener."""
    return ProxyThread(kafka_ssl(kafka_broker), qm=qm, listener_tls=listener_props(pki),
                       upstream_tls=upstream_props(kafka_broker), **options)


def test_confluent_kafka_over_ssl_both_sides_byte_for_byte(pki, kafka_broker, tmp_path):
    from kquota.proxy.request_log_writer import RequestLogWriter
    from test_proxy_bridge import logged_rows

    log = RequestLogWriter(str(tmp_path))
    proxy = tls_proxy(kafka_broker, pki, request_log=log)
    try:
        roundtrip(proxy.address, ssl_client_config(pki, pki.alice))
        roundtrip(proxy.address, ssl_client_config(pki))  # no client certificate: ANONYMOUS
        def logged_users() -> set[str]:
            return {row["user"] for row in logged_rows(log, tmp_path)}

        wait_until(lambda: logged_users() >= {"alice", "ANONYMOUS"}, 10)  # the native rows are drained every 0.2 s
        users = logged_users()
        assert users == {"alice", "ANONYMOUS"}, users  # RULES map alice's certificate to "alice"
        assert proxy.proxy.broker_ports, "the cluster's brokers are reached through the proxy's TLS ports"
        failures = proxy.proxy.tls_failures
        assert not any(failures["client"].values()) and not any(failures["broker"].values()), failures
    finally:
        proxy.stop()


@pytest.mark.timing
def test_user_quota_on_the_client_certificates_principal(pki, kafka_broker):
    quota = 200_000
    qm = kquota.QuotaManager(window_num=2, window_size_seconds=1)
    # RULES maps CN=alice,OU=eng,O=kquota to "alice": her quota; admin has none.
    qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": quota})])
    proxy = tls_proxy(kafka_broker, pki, qm=qm)
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = "tlsq-" + str(time.monotonic_ns())
        admin = AdminClient({"bootstrap.servers": proxy.address, **ssl_client_config(pki, pki.admin)})
        for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            f.result(15)
        meters = {"alice": Meter(), "admin": Meter()}
        stop = threading.Event()
        threads = [threading.Thread(target=produce_loop, args=(proxy.address, topic, "tls-" + who, meters[who], stop,
                                                              ssl_client_config(pki, getattr(pki, who)))) for who in meters]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(8)  # the measured window: the rates below are over its last 5 s
        stop.set()
        for t in threads:
            t.join(30)
        alice = meters["alice"].rate(t0 + 3, t0 + 8)
        other = meters["admin"].rate(t0 + 3, t0 + 8)
        assert 0.7 * quota <= alice <= 1.3 * quota, alice
        assert meters["alice"].throttles and max(meters["alice"].throttles) > 0
        assert not meters["admin"].throttles
        assert other > 2 * quota, other
    finally:
        proxy.stop()
        qm.close()


def test_cli_listener_form_config_and_broker_config(pki, kafka_broker, tmp_path):
    """``kquota proxy --listen SSL://... --config --bootstrap-server SSL://... --broker-config``:
    files in java.util.Properties syntax (Kafka's CA inline, PEM continued over lines; the proxy's
    PKCS12 keystore for Kafka's mutual TLS); the admin principal is the DN as Kafka's DEFAULT
    rule gives it, commas included."""
    import subprocess
    import sys

    from waiting import free_port, wait_port
    from test_proxy_ip_quota_admin import alter, entry

    pem = kafka_broker.tls.ca_pem.read_text().strip().replace("\n", "\\n\\\n    ")
    broker_config = tmp_path / "broker.properties"
    broker_config.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.certificates={pem}\n"
                             f"ssl.keystore.type=PKCS12\nssl.keystore.location={kafka_broker.tls.proxy.p12}\n"
                             f"ssl.keystore.password={kafka_broker.tls.password}\n")
    config = tmp_path / "proxy.properties"
    config.write_text(f"ssl.keystore.location={pki.server.keystore_pem}\nssl.truststore.location={pki.ca.pem}\n"
                      "ssl.client.auth=required\n")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", f"SSL://{kafka_broker.listeners['SSL']}",
         "--broker-config", str(broker_config), "--listen", f"SSL://127.0.0.1:{port}", "--config", str(config),
         "--store", f"sqlite:///{tmp_path}/q.db", "--admin-principals", "User:CN=admin,OU=ops,O=kquota,User:bob"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_port(port, 20)
        roundtrip(f"127.0.0.1:{port}", ssl_client_config(pki, pki.alice))
        for cert, code in ((pki.admin, 0), (pki.alice, 31)):  # 31: CLUSTER_AUTHORIZATION_FAILED
            w = tls_wire(("127.0.0.1", port), pki, cert)
            try:
                assert alter(w, [entry({"user": "carol"}, 5, key="producer_byte_rate")])[0][0] == code, cert.name
            finally:
                w.close()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert "is not used by the proxy" not in err.decode()


def test_listener_certificate_reloaded_without_restart_open_connections_keep_theirs(pki, kafka_broker, tmp_path):
    import shutil

    from kquota.kafka.protocol import apis

    keystore = tmp_path / "listener.keystore.pem"
    shutil.copy(pki.server.keystore_pem, keystore)
    proxy = ProxyThread(kafka_ssl(kafka_broker), listener_tls={"ssl.keystore.location": str(keystore)},
                        upstream_tls=upstream_props(kafka_broker))

    def subject(w) -> str:
        return dict(x[0] for x in w.sock.getpeercert()["subject"])["commonName"]

    def api_versions(w) -> int:
        return w.call(apis.API_VERSIONS, 0, "ApiVersions", {})["ErrorCode"]

    try:
        address = proxy.proxy.bootstrap_address
        old = tls_wire(address, pki)
        assert subject(old) == "localhost" and api_versions(old) == 0
        renewed = pki.ca.issue("renewed", _name(O="kquota", CN="renewed.kquota.test"), server=True)
        tmp = tmp_path / "next.pem"
        tmp.write_bytes(renewed.keystore_pem.read_bytes())
        tmp.replace(keystore)  # as a certificate manager renews: a new file moved in place

        def renewed_served() -> bool:
            w = tls_wire(address, pki)
            try:
                return subject(w) == "renewed.kquota.test"
            finally:
                w.close()

        assert wait_until(renewed_served, 15, 0.5), "the renewed certificate is served to new connections"
        assert subject(old) == "localhost" and api_versions(old) == 0  # the open connection goes on
        old.close()
    finally:
        proxy.stop()
