"""``kquota configs --bootstrap-server`` against a running ``kquota proxy`` process
in front of Apache Kafka's broker (its PLAINTEXT listener, or its SASL_PLAINTEXT one behind a SASL
proxy listener): round trips of every entity kind over
DescribeClientQuotas / AlterClientQuotas, Kafka's filters, ``--dry-run`` (ValidateOnly), refused
alters reported per entity, a recommended quota file applied over the protocol and enforced,
SASL with ``--command-config``, and a broker without the quota APIs (tansu). Over TLS, to Apache
Kafka's own listeners: test_configs_bootstrap_tls.py."""

from __future__ import annotations

import json
import sqlite3

import pytest
from proxy_cli import assert_enforced_once_applied, capture_and_recommend, start_proxy, stop_proxy

from kquota.cli import main

pytestmark = pytest.mark.process

ADMINS = "User:admin,ANONYMOUS"  # PLAINTEXT clients are ANONYMOUS: admins here unless SASL says otherwise


@pytest.fixture
def proxy(broker, tmp_path):
    """A PLAINTEXT listener: its clients are ANONYMOUS, an admin here."""
    proc, port = start_proxy(broker, tmp_path, "--admin-principals", ADMINS)
    yield f"127.0.0.1:{port}"
    code, err = stop_proxy(proc)
    assert code == 0, err


@pytest.fixture
def sasl_proxy(kafka_broker, tmp_path):
    """A SASL_PLAINTEXT listener in front of Kafka's: a client is the SASL principal Kafka
    authenticated, and one that does not authenticate is closed, as Kafka's authenticator closes it."""
    proc, port = start_proxy(kafka_broker.listener("SASL_PLAINTEXT"), tmp_path, "--admin-principals", ADMINS,
                             protocol="SASL_PLAINTEXT")
    yield f"127.0.0.1:{port}"
    code, err = stop_proxy(proc)
    assert code == 0, err


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["configs", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def described(capsys, address: str, *argv: str) -> list[dict]:
    code, out, err = run(capsys, "--bootstrap-server", address, "--describe", "--json", *argv)
    assert code == 0, err
    return json.loads(out)["quotas"]


def props(tmp_path, name: str, **values: str) -> str:
    path = tmp_path / name
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return str(path)


def sasl_props(tmp_path, user: str, protocol: str = "SASL_PLAINTEXT", **more: str) -> str:
    password = f"{user}-secret"  # kafka.sh's users
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{user}" password="{password}";'
    return props(tmp_path, f"{user}.properties", **{"security.protocol": protocol, "sasl.mechanism": "PLAIN",
                                                      "sasl.jaas.config": jaas}, **more)


EVERY_KIND = [
    (["--entity-type", "users", "--entity-name", "alice"], {"user": "alice"}, "producer_byte_rate=1024"),
    (["--entity-type", "users", "--entity-default"], {"user": None}, "consumer_byte_rate=2048"),
    (["--entity-type", "clients", "--entity-name", "app"], {"client-id": "app"}, "request_percentage=50"),
    (["--entity-type", "users", "--entity-name", "bob", "--entity-type", "clients", "--entity-name", "etl"],
     {"user": "bob", "client-id": "etl"}, "producer_byte_rate=4096,controller_mutation_rate=5"),
    (["--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-default"],
     {"user": None, "client-id": None}, "producer_byte_rate=8192"),
    (["--entity-type", "ips", "--entity-name", "127.0.0.5"], {"ip": "127.0.0.5"}, "connection_creation_rate=20"),
    (["--ip-defaults"], {"ip": None}, "connection_creation_rate=50"),
]


def test_round_trip_of_every_entity_kind(proxy, capsys, tmp_path):
    """Each kind altered over the protocol reads back the same, table and JSON; deleting every
    key leaves nothing; the JSON fed to a store as --quota-file gives that store the same quotas."""
    for entity_args, _, config in EVERY_KIND:
        code, out, err = run(capsys, "--bootstrap-server", proxy, "--alter", "--add-config", config, *entity_args)
        assert code == 0, err
        assert out.startswith("Completed updating config for "), out
    got = {json.dumps(q["entity"], sort_keys=True): q["config"] for q in described(capsys, proxy)}
    want = {json.dumps(entity, sort_keys=True): {k: float(v) for k, v in (i.split("=") for i in config.split(","))}
            for _, entity, config in EVERY_KIND}
    assert got == want
    # --alter --json prints what the cluster holds for the altered entity afterwards.
    code, out, err = run(capsys, "--bootstrap-server", proxy, "--alter", "--json", "--add-config",
                         "consumer_byte_rate=3000", "--user", "alice")
    assert code == 0, err
    assert json.loads(out)["quotas"] == [
        {"entity": {"user": "alice"}, "config": {"producer_byte_rate": 1024, "consumer_byte_rate": 3000}}]
    assert run(capsys, "--bootstrap-server", proxy, "--alter", "--delete-config", "consumer_byte_rate",
               "--user", "alice")[0] == 0
    code, table, _ = run(capsys, "--bootstrap-server", proxy, "--describe")
    assert code == 0
    assert "alice" in table and "127.0.0.5" in table and "<default>" in table and "IP" in table

    # The cluster's --describe --json is a quota file for a store, which then holds the same.
    doc = tmp_path / "from-cluster.json"
    doc.write_text(json.dumps({"quotas": described(capsys, proxy)}))
    store = f"sqlite:///{tmp_path}/copy.db"
    assert run(capsys, "--store", store, "--alter", "--quota-file", str(doc))[0] == 0
    code, out, _ = run(capsys, "--store", store, "--describe", "--json")
    assert {json.dumps(q["entity"], sort_keys=True): q["config"] for q in json.loads(out)["quotas"]} == want

    for entity_args, _, config in EVERY_KIND:
        keys = ",".join(i.split("=")[0] for i in config.split(","))
        assert run(capsys, "--bootstrap-server", proxy, "--alter", "--delete-config", keys, *entity_args)[0] == 0
    assert described(capsys, proxy) == []
    assert run(capsys, "--bootstrap-server", proxy, "--describe")[1].startswith("no quotas in the cluster at ")


def test_narrowed_describes_use_kafkas_match_types(proxy, capsys):
    """A name is an exact match, --entity-default the default, a bare type any name; strict, so
    users-only entities never list <user, client-id> ones (as kafka-configs' containsOnly)."""
    for entity_args, _, config in EVERY_KIND:
        assert run(capsys, "--bootstrap-server", proxy, "--alter", "--add-config", config, *entity_args)[0] == 0

    def entities(*argv):
        return [q["entity"] for q in described(capsys, proxy, *argv)]

    assert entities("--entity-type", "users") == [{"user": None}, {"user": "alice"}]
    assert entities("--entity-type", "users", "--entity-name", "alice") == [{"user": "alice"}]
    assert entities("--user-defaults") == [{"user": None}]
    assert entities("--entity-type", "clients") == [{"client-id": "app"}]
    assert entities("--entity-type", "users", "--entity-type", "clients") == [
        {"user": None, "client-id": None}, {"user": "bob", "client-id": "etl"}]
    assert entities("--entity-type", "users", "--entity-name", "bob", "--entity-type", "clients") == [
        {"user": "bob", "client-id": "etl"}]
    assert entities("--entity-type", "ips") == [{"ip": None}, {"ip": "127.0.0.5"}]
    assert entities("--ip", "127.0.0.5") == [{"ip": "127.0.0.5"}]
    assert entities("--ip-defaults") == [{"ip": None}]
    code, out, _ = run(capsys, "--bootstrap-server", proxy, "--describe", "--user", "nobody")
    assert code == 0 and out.strip() == "no quotas for users/nobody"


def test_dry_run_validates_and_writes_nothing(proxy, capsys, tmp_path):
    code, out, err = run(capsys, "--bootstrap-server", proxy, "--alter", "--dry-run",
                         "--add-config", "producer_byte_rate=1000", "--user", "dry")
    assert code == 0, err
    assert out.strip() == 'Validated config for user="dry" (--dry-run: nothing changed).', out
    code, out, err = run(capsys, "--bootstrap-server", proxy, "--alter", "--dry-run", "--json",
                         "--add-config", "producer_byte_rate=1000", "--user", "dry")
    assert code == 0, err
    assert json.loads(out)["quotas"] == [{"entity": {"user": "dry"}, "config": {"producer_byte_rate": 1000}}]
    assert described(capsys, proxy) == []
    rows = sqlite3.connect(str(tmp_path / "q.db")).execute("select count(*) from sqlite_master").fetchone()
    assert rows is not None  # the store exists ...
    assert main(["configs", "--store", f"sqlite:///{tmp_path}/q.db", "--describe", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["quotas"] == []  # ... and holds nothing
    # ValidateOnly still validates: an unknown key is refused by the cluster, nothing applied.
    code, out, err = run(capsys, "--bootstrap-server", proxy, "--alter", "--dry-run",
                         "--add-config", "bogus_rate=1", "--user", "dry")
    assert code == 1 and 'Error while updating config for user="dry": InvalidRequestException' in err, err


def test_quotas_marked_shadow_travel_over_the_protocol_into_the_proxys_store(proxy, capsys, broker, tmp_path):
    """A kquota extension: the proxy's AlterClientQuotas stores a quota marked shadow (checked as
    its key), DescribeClientQuotas lists it; Apache Kafka's broker refuses the key."""
    code, _, err = run(capsys, "--bootstrap-server", proxy, "--alter", "--add-config",
                       "producer_byte_rate=1000,shadow.producer_byte_rate=500", "--user", "etl")
    assert code == 0, err
    assert described(capsys, proxy) == [
        {"entity": {"user": "etl"}, "config": {"producer_byte_rate": 1000, "shadow.producer_byte_rate": 500}}]
    code, _, err = run(capsys, "--bootstrap-server", proxy, "--alter", "--add-config",
                       "shadow.producer_byte_rate=0.5", "--user", "etl")
    assert code == 1 and "shadow.producer_byte_rate" in err, err
    assert main(["configs", "--promote-shadow", "--store", f"sqlite:///{tmp_path}/q.db"]) == 0
    capsys.readouterr()
    assert described(capsys, proxy) == [{"entity": {"user": "etl"}, "config": {"producer_byte_rate": 500}}]
    code, _, err = run(capsys, "--bootstrap-server", broker.address, "--alter", "--add-config",
                       "shadow.producer_byte_rate=500", "--user", "etl")
    assert code == 1 and "InvalidRequestException" in err, err


def test_refused_alters_are_reported_per_entity(sasl_proxy, capsys, tmp_path):
    proxy = sasl_proxy
    admin = ("--command-config", sasl_props(tmp_path, "admin"))
    # A principal the proxy does not list as admin: every entry of the one request refused.
    quota_file = tmp_path / "q.json"
    quota_file.write_text(json.dumps({"quotas": [
        {"entity": {"user": "alice"}, "config": {"producer_byte_rate": 1000}},
        {"entity": {"ip": "127.0.0.9"}, "config": {"connection_creation_rate": 5}},
    ]}))
    code, out, err = run(capsys, "--bootstrap-server", proxy, "--command-config", sasl_props(tmp_path, "alice"),
                         "--alter", "--quota-file", str(quota_file))
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert lines[0] == ('Error while updating config for user="alice": ClusterAuthorizationException: '
                        "principal User:alice may not alter client quotas"), err
    assert lines[1].startswith('Error while updating config for ip="127.0.0.9": ClusterAuthorizationException'), \
        err
    assert "2 of 2 entries refused" in lines[2], err
    assert described(capsys, proxy, *admin) == []
    # The admin principal, over SASL: the same file applied.
    code, out, err = run(capsys, "--bootstrap-server", proxy, "--command-config", sasl_props(tmp_path, "admin"),
                         "--alter", "--quota-file", str(quota_file))
    assert code == 0, err
    assert len(described(capsys, proxy, *admin)) == 2
    # An unknown key: the cluster's error, naming the entity; nothing changed.
    code, out, err = run(capsys, "--bootstrap-server", proxy, *admin, "--alter", "--add-config",
                         "producer_byte_rate=5,bogus_rate=1", "--user", "alice")
    assert code == 1 and 'Error while updating config for user="alice": InvalidRequestException' in err, err
    assert "bogus_rate" in err
    assert {q["entity"].get("user"): q["config"] for q in described(capsys, proxy, *admin, "--entity-type", "users")} == {
        "alice": {"producer_byte_rate": 1000}}
    # A name that is not an IP address: refused in Kafka's words before anything is sent.
    code, out, err = run(capsys, "--bootstrap-server", proxy, *admin, "--alter", "--add-config",
                         "connection_creation_rate=5", "--ip", "not-an-ip")
    assert code == 1 and "The entity name for ips must be a valid IP" in err
    # A client that does not authenticate on a SASL listener is closed before its request is
    # read (Kafka's IllegalSaslStateException), whoever the proxy's admins are.
    code, out, err = run(capsys, "--bootstrap-server", proxy, "--describe")
    assert code == 1 and "closed the connection" in err, err


def test_bad_command_lines_and_connections_fail_in_one_line(proxy, capsys, tmp_path):
    jks = tmp_path / "ts.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")  # a JKS store's magic and version
    cases = [
        (["--bootstrap-server", proxy, "--store", "x.db", "--describe"], "alternatives"),
        (["--dry-run", "--alter", "--add-config", "a=1", "--user", "u"], "--dry-run needs --bootstrap-server"),
        (["--command-config", str(tmp_path / "c.properties"), "--store", "x.db", "--describe"],
         "--command-config needs --bootstrap-server or a kafka:// --store"),
        (["--bootstrap-server", "nohostport", "--describe"], "expected HOST:PORT"),
        (["--bootstrap-server", proxy, "--command-config", str(tmp_path / "missing"), "--describe"],
         "cannot read --command-config"),
        (["--bootstrap-server", proxy, "--command-config",
          props(tmp_path, "gss.properties", **{"security.protocol": "SASL_PLAINTEXT"}), "--describe"],
         "GSSAPI (Kafka's default) is not supported"),
        (["--bootstrap-server", proxy, "--command-config",
          props(tmp_path, "jks.properties", **{"security.protocol": "SSL",
                                               "ssl.truststore.location": str(jks)}), "--describe"],
         "ssl.truststore.location: JKS keystores are not supported"),
    ]
    for argv, words in cases:
        code, out, err = run(capsys, *argv)
        assert code == 1 and words in err and "Traceback" not in err, (argv, err)
    from waiting import free_port

    dead = f"127.0.0.1:{free_port()}"
    code, _, err = run(capsys, "--bootstrap-server", dead, "--describe")
    assert code == 1 and err == f"kquota: error: cannot connect to {dead}: Connection refused\n", err
    # A list is tried in order, as Kafka's bootstrap: the first server that accepts is used.
    code, out, err = run(capsys, "--bootstrap-server", f"{dead},{proxy}", "--describe")
    assert code == 0 and out.startswith("no quotas in the cluster at " + proxy), err
    # TLS spoken to a plaintext port: a clear failure, not a hang or traceback.
    conf = props(tmp_path, "ssl.properties", **{"security.protocol": "SSL"})
    code, _, err = run(capsys, "--bootstrap-server", proxy, "--command-config", conf, "--describe")
    assert code == 1 and "TLS handshake with" in err, err


def test_a_broker_without_the_quota_apis_is_named(capsys):
    """tansu, not Kafka: Apache Kafka's broker serves both APIs, and tansu lists neither in its
    ApiVersions answer. That exchange succeeds and the command says what the cluster lacks, in
    one line."""
    from proxy_support import Tansu

    broker = Tansu()
    try:
        code, _, err = run(capsys, "--bootstrap-server", broker.address, "--describe")
        assert code == 1 and err == (f"kquota: error: UnsupportedVersionException: {broker.address} does not "
                                     "support DescribeClientQuotas (API key 48)\n"), err
        code, _, err = run(capsys, "--bootstrap-server", broker.address, "--alter",
                           "--add-config", "producer_byte_rate=5", "--user", "a")
        assert code == 1 and "does not support AlterClientQuotas (API key 49)" in err, err
    finally:
        broker.stop()


@pytest.mark.timing
def test_recommended_quota_file_applied_over_the_protocol_is_enforced(broker, spark, tmp_path, capsys):
    """``kquota pipeline recommend``'s quotas.json, applied to a running proxy with
    ``configs --bootstrap-server --quota-file`` (one AlterClientQuotas request), holds a real
    producer through that proxy to the recommended rate."""
    topic, rec, quota = capture_and_recommend(broker, tmp_path)
    capsys.readouterr()
    entries = len(json.loads((rec / "quotas.json").read_text())["quotas"])

    def apply(address: str) -> None:
        code, out, err = run(capsys, "--bootstrap-server", address, "--alter", "--quota-file", str(rec / "quotas.json"))
        assert code == 0, err
        assert out.count("Completed updating config for ") == entries

    assert_enforced_once_applied(broker, tmp_path, topic, quota, apply, "--admin-principals", ADMINS)
