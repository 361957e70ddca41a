"""ip entities (KIP-612) in the stores: ``kquota configs --entity-type ips`` / ``--ip`` /
``--ip-defaults`` round trips on SQLite and ZooKeeper, Kafka's ``/config/ips/<ip>`` layout and
``ips/<ip>`` change notifications, bad addresses refused with nothing written, quota files, and
a watcher carrying a live ip alter into a running manager."""

from __future__ import annotations

import json
import threading

import pytest
from store_helpers import assert_bad_nodes_skipped, assert_kafka_layout, store_url
from test_configs_cli import cli, state

from kquota import ClientQuotaEntity, QuotaManager
from kquota.config_file import parse_quota_config
from kquota.stores import open_store
from kquota.watcher import QuotaConfigWatcher

E = ClientQuotaEntity
RATE = "connection_creation_rate"


@pytest.fixture(params=["sqlite", "zookeeper"])
def url(request, tmp_path):
    return store_url(request.param, tmp_path)


def test_ips_round_trip(capsys, url):
    base = ["--store", url, "--alter", "--add-config"]
    assert cli(capsys, *base, f"{RATE}=20", "--entity-type", "ips", "--entity-name", "10.1.2.3")[0] == 0
    assert cli(capsys, *base, f"{RATE}=50", "--entity-type", "ips", "--entity-default")[0] == 0
    code, out, _ = cli(capsys, *base, f"{RATE}=7", "--ip", "0:0:0:0:0:0:0:1")
    assert code == 0 and 'ip="::1"' in out
    assert cli(capsys, *base, f"{RATE}=9", "--ip-defaults")[0] == 0
    assert cli(capsys, *base, "producer_byte_rate=5", "--user", "u")[0] == 0
    assert state(url) == {
        E({"ip": "10.1.2.3"}): {RATE: 20.0},
        E({"ip": None}): {RATE: 9.0},
        E({"ip": "::1"}): {RATE: 7.0},
        E({"user": "u"}): {"producer_byte_rate": 5.0},
    }
    code, out, _ = cli(capsys, "--store", url, "--describe", "--entity-type", "ips")
    assert code == 0
    assert out.split("\n")[0].split() == ["IP", "CONFIGS"] and "producer_byte_rate" not in out
    assert "<default>  connection_creation_rate=9" in out
    code, out, _ = cli(capsys, "--store", url, "--describe", "--ip", "10.1.2.3", "--json")
    assert json.loads(out) == {"quotas": [{"entity": {"ip": "10.1.2.3"}, "config": {RATE: 20}}]}
    code, out, _ = cli(capsys, "--store", url, "--describe")
    assert "USER" in out and "IP" in out
    assert cli(capsys, "--store", url, "--alter", "--delete-config", RATE, "--ip", "::1")[0] == 0
    assert E({"ip": "::1"}) not in state(url)
    # A whole --describe --json document reads back as the store's state.
    code, out, _ = cli(capsys, "--store", url, "--describe", "--json")
    assert dict(parse_quota_config(json.loads(out))) == state(url)


@pytest.mark.parametrize("args, message", [
    (["--add-config", f"{RATE}=5", "--ip", "not an ip"], "must be a valid IP"),
    (["--add-config", f"{RATE}=5", "--entity-type", "ips", "--entity-name", "RFC2606.invalid"], "must be a valid IP"),
    (["--add-config", f"{RATE}=5.5", "--ip", "10.0.0.1"], "cannot be a fractional value"),
    (["--add-config", "producer_byte_rate=5", "--ip", "10.0.0.1"], "Invalid configuration key"),
    (["--add-config", f"{RATE}=5", "--entity-type", "ips", "--entity-type", "users", "--entity-default",
      "--entity-name", "u"], "Only 'users' and 'clients' entity types may be specified together"),
    (["--add-config", f"{RATE}=5", "--ip", "10.0.0.1", "--ip-defaults"], "mutually exclusive"),
    (["--add-config", f"{RATE}=5", "--entity-type", "ips"], "needs --entity-name or --entity-default"),
])
def test_bad_ip_alters_are_refused_and_nothing_is_written(capsys, url, args, message):
    assert cli(capsys, "--store", url, "--alter", "--add-config", f"{RATE}=1", "--ip", "10.9.9.9")[0] == 0
    before = state(url)
    code, out, err = cli(capsys, "--store", url, "--alter", *args)
    assert code != 0 and message in err and out == ""
    assert state(url) == before


@pytest.mark.process  # ZooKeeper
def test_zookeeper_layout_is_kafkas(tmp_path):
    url = store_url("zookeeper", tmp_path)
    s = open_store(url)
    try:
        s.alter([({"ip": "10.1.2.3"}, {RATE: 20}), ({"ip": None}, {RATE: 5})])
        assert_kafka_layout(s, {"ips/10.1.2.3": {"version": 1, "config": {RATE: "20"}},
                                "ips/<default>": {"version": 1, "config": {RATE: "5"}}})
        # A node Kafka wrote for an address in another spelling, or a bad value, is reported and skipped.
        errors = assert_bad_nodes_skipped(s, {
            "ips/0:0:0:0:0:0:0:1": b'{"version":1,"config":{"connection_creation_rate":"3"}}',
            "ips/10.0.0.7": b'{"version":1,"config":{"connection_creation_rate":"1.5"}}',
        }, {E({"ip": "10.1.2.3"}): {RATE: 20.0}, E({"ip": None}): {RATE: 5.0}})
        assert len(errors) == 2
    finally:
        s.close()


@pytest.mark.process
def test_a_live_ip_alter_reaches_a_watching_manager(url):
    writer = open_store(url)
    qm = QuotaManager(expiry_interval_seconds=None)
    reader = open_store(url)
    try:
        with QuotaConfigWatcher(reader, qm) as w:
            writer.alter([({"ip": "127.0.0.2"}, {RATE: 3})])
            done = threading.Event()
            for _ in range(1500):
                if qm.connection_rate_for_ip("127.0.0.2") == 3:
                    break
                done.wait(0.02)
            assert qm.connection_rate_for_ip("127.0.0.2") == 3
            writer.alter([({"ip": "127.0.0.2"}, {RATE: None})])
            for _ in range(1500):
                if qm.connection_rate_for_ip("127.0.0.2") == 2**31 - 1:
                    break
                done.wait(0.02)
            assert qm.describe_client_quotas() == {}
            assert not w.errors
    finally:
        reader.close()
        writer.close()
        qm.close()


def test_quota_files_take_ip_entities():
    doc = {"quotas": [{"entity": {"ip": "10.1.2.3"}, "config": {RATE: 20}},
                      {"entity": {"ip": None}, "config": {RATE: 5}}]}
    assert parse_quota_config(doc) == [(E({"ip": "10.1.2.3"}), {RATE: 20.0}), (E({"ip": None}), {RATE: 5.0})]
    for bad, message in [({"ip": "nope"}, "not a valid IP"), ({"ip": "1.2.3.4", "user": "u"}, "should not be combined"),
                         ({"ipx": "1.2.3.4"}, "unknown entity key")]:
        with pytest.raises(ValueError, match=message):
            parse_quota_config({"quotas": [{"entity": bad, "config": {RATE: 1}}]})
    with pytest.raises(ValueError, match="fractional"):
        parse_quota_config({"quotas": [{"entity": {"ip": "1.2.3.4"}, "config": {RATE: 1.5}}]})
