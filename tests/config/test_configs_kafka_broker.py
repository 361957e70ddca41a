"""``kquota configs --bootstrap-server`` and Apache's own ``kafka-configs --bootstrap-server``
against Apache Kafka's broker (``kafka_broker``) and against a ``kquota proxy`` in front of it:
the same quotas written through either are described the same way, and Apache's tool prints
through the proxy exactly what it prints against the broker (users, clients, ips, a <user,
client-id> pair and the defaults). Entity names are this module's own: the broker is shared."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from kafka_proxy import KquotaProxy

from kquota.cli import main

TAG = uuid.uuid4().hex[:6]
USER, CLIENT, IP = f"cfg-user-{TAG}", f"cfg-client-{TAG}", "10.20.30.40"
# (kafka-configs' entity arguments, the quotas set on it)
# Kafka's broker lists an entity's quotas in its HashMap's order (kquota/proxy/quota_order.py:
# request_percentage before producer_byte_rate when they are the only two); the admin client's own
# HashMap keeps that order where two keys share its bucket, as producer_byte_rate and
# request_percentage do: kafka-configs then prints the broker's order.
ENTITIES = [
    (("--entity-type", "users", "--entity-name", USER), "producer_byte_rate=1048576,consumer_byte_rate=2097152"),
    (("--entity-type", "clients", "--entity-name", CLIENT), "producer_byte_rate=4096,request_percentage=50"),
    (("--entity-type", "users", "--entity-name", USER, "--entity-type", "clients", "--entity-name", CLIENT),
     "consumer_byte_rate=8192,controller_mutation_rate=10"),
    (("--entity-type", "ips", "--entity-name", IP), "connection_creation_rate=7"),
]


@pytest.fixture(scope="module")
def proxy(kafka_broker, tmp_path_factory):
    """A proxy in front of the broker's PLAINTEXT listener; PLAINTEXT clients (ANONYMOUS) are its
    admins, as they are the broker's super users."""
    p = KquotaProxy(kafka_broker.listeners["PLAINTEXT"], tmp_path_factory.mktemp("configs-proxy"),
                    "--admin-principals", "User:admin,ANONYMOUS")
    yield p.address
    code, err = p.stop()
    assert code == 0, err


def kquota_configs(capsys, *argv: str) -> str:
    code = main(["configs", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def described(capsys, address: str, *argv: str) -> dict:
    """``kquota configs --describe --json``: {(entity entries): quotas}."""
    out = kquota_configs(capsys, "--bootstrap-server", address, "--describe", "--json", *argv)
    return {tuple(sorted(q["entity"].items())): q["config"] for q in json.loads(out)["quotas"]}


def kafka_configs(kafka_broker, address: str, *argv: str) -> str:
    r = kafka_broker.tools("kafka-configs", "--bootstrap-server", address, *argv)
    assert r.returncode == 0, f"kafka-configs {' '.join(argv)} against {address}: {r.stdout}{r.stderr}"
    return r.stdout


def both(kafka_broker, proxy, *argv: str) -> tuple[str, str]:
    """Apache's kafka-configs with ``argv`` against the broker and against the proxy (two JVMs at
    once)."""
    with ThreadPoolExecutor(2) as pool:
        direct = pool.submit(kafka_configs, kafka_broker, kafka_broker.listeners["PLAINTEXT"], *argv)
        proxied = pool.submit(kafka_configs, kafka_broker, proxy, *argv)
        return direct.result(), proxied.result()


def test_kquota_configs_round_trips_against_the_broker_and_the_proxy(kafka_broker, proxy, capsys):
    name = f"kq-{TAG}"
    for address in (kafka_broker.listeners["PLAINTEXT"], proxy):
        kquota_configs(capsys, "--bootstrap-server", address, "--alter", "--user", name,
                       "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
        kquota_configs(capsys, "--bootstrap-server", address, "--alter", "--client", name,
                       "--add-config", "request_percentage=25")
        kquota_configs(capsys, "--bootstrap-server", address, "--alter", "--ip", "10.9.8.7",
                       "--add-config", "connection_creation_rate=3")
        kquota_configs(capsys, "--bootstrap-server", address, "--alter", "--user", name,
                       "--delete-config", "consumer_byte_rate")
    for address in (kafka_broker.listeners["PLAINTEXT"], proxy):
        assert described(capsys, address, "--user", name) == {(("user", name),): {"producer_byte_rate": 1024}}
        assert described(capsys, address, "--client", name) == {(("client-id", name),): {"request_percentage": 25}}
        assert described(capsys, address, "--ip", "10.9.8.7") == {(("ip", "10.9.8.7"),):
                                                                 {"connection_creation_rate": 3}}


def test_kquota_configs_over_sasl_as_the_admin_user(kafka_broker, capsys, tmp_path):
    # the broker's SASL_PLAINTEXT listener with PLAIN (what --command-config takes) and real credentials
    conf = tmp_path / "admin.properties"
    conf.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                    'password="admin-secret";\n')
    name = f"kq-sasl-{TAG}"
    address = kafka_broker.listeners["SASL_PLAINTEXT"]
    kquota_configs(capsys, "--bootstrap-server", address, "--command-config", str(conf), "--alter", "--user", name,
                   "--add-config", "producer_byte_rate=4096")
    assert described(capsys, address, "--command-config", str(conf), "--user", name) == {
        (("user", name),): {"producer_byte_rate": 4096}}


def test_kquota_configs_refused_for_a_user_the_broker_does_not_authorize(kafka_broker, capsys, tmp_path):
    # alice is no super user and has no ALTER_CONFIGS on the cluster: the broker refuses her
    conf = tmp_path / "alice.properties"
    conf.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                    'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
                    'password="alice-secret";\n')
    code = main(["configs", "--bootstrap-server", kafka_broker.listeners["SASL_PLAINTEXT"], "--command-config",
                 str(conf), "--alter", "--user", f"kq-denied-{TAG}", "--add-config", "producer_byte_rate=1"])
    out, err = capsys.readouterr()
    assert code != 0
    assert "ClusterAuthorizationException: Cluster authorization failed." in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("entity, quotas", ENTITIES, ids=["user", "client", "user-client", "ip"])
def test_apaches_kafka_configs_prints_through_the_proxy_what_it_prints_against_the_broker(
        kafka_broker, proxy, entity, quotas):
    # written with kquota configs (a JVM per alter would cost seconds)
    for address in (kafka_broker.listeners["PLAINTEXT"], proxy):
        assert main(["configs", "--bootstrap-server", address, "--alter", *entity, "--add-config", quotas]) == 0
    described_ = both(kafka_broker, proxy, "--describe", *entity)
    for quota in quotas.split(","):
        key, value = quota.split("=")
        assert f"{key}={float(value)}" in described_[0], described_[0]
    assert described_[1] == described_[0]


def test_apaches_kafka_configs_alters_through_the_proxy_as_against_the_broker(kafka_broker, proxy, capsys):
    name = f"cfg-alter-{TAG}"
    direct, proxied = both(kafka_broker, proxy, "--alter", "--entity-type", "users", "--entity-name", name,
                           "--add-config", "producer_byte_rate=3072,consumer_byte_rate=6144")
    assert proxied == direct == f"Completed updating config for user {name}.\n"
    for address in (kafka_broker.listeners["PLAINTEXT"], proxy):
        assert described(capsys, address, "--user", name) == {
            (("user", name),): {"producer_byte_rate": 3072, "consumer_byte_rate": 6144}}


def test_apaches_kafka_configs_defaults_through_the_proxy(kafka_broker, proxy):
    entity = ("--entity-type", "clients", "--entity-default")
    try:
        both(kafka_broker, proxy, "--alter", *entity, "--add-config", "consumer_byte_rate=1073741824")
        direct, proxied = both(kafka_broker, proxy, "--describe", *entity)
        assert proxied == direct
        assert direct == "Quota configs for the default client-id are consumer_byte_rate=1.073741824E9\n"
    finally:  # the default applies to every client of the shared broker (1 GB/s: no one is held): removed
        both(kafka_broker, proxy, "--alter", *entity, "--delete-config", "consumer_byte_rate")
