"""`kquota configs`: kafka-configs syntax, table and JSON output, one-line errors."""

import json

import pytest
from store_helpers import run_cli, store_url

from kquota import ClientQuotaEntity
from kquota.cli import main
from kquota.config_file import parse_quota_config
from kquota.stores import open_store

pytestmark = pytest.mark.process

E = ClientQuotaEntity


@pytest.fixture(params=["sqlite", "zookeeper", "kafka"])
def url(request, tmp_path):
    return store_url(request.param, tmp_path, request)


def cli(capsys, *args):
    code = main(["configs", *args])
    out, err = capsys.readouterr()
    return code, out, err


def state(url):
    s = open_store(url)
    try:
        return s.describe()
    finally:
        s.close()


def test_kip55_examples(capsys, url):
    # The three kafka-configs commands of KIP-55, with --store in place of --zookeeper.
    assert cli(capsys, "--store", url, "--alter", "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048",
               "--entity-name", "user1", "--entity-type", "users")[0] == 0
    assert cli(capsys, "--store", url, "--alter", "--add-config", "producer_byte_rate=10000,consumer_byte_rate=20000",
               "--entity-type", "users", "--entity-default")[0] == 0
    code, out, err = cli(capsys, "--store", url, "--alter", "--add-config", "producer_byte_rate=10,consumer_byte_rate=20",
                         "--entity-name", "clientA", "--entity-type", "clients", "--entity-name", "user2",
                         "--entity-type", "users")
    assert code == 0 and err == ""
    assert 'user="user2", client-id="clientA"' in out
    assert state(url) == {
        E({"user": "user1"}): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
        E({"user": None}): {"producer_byte_rate": 10000.0, "consumer_byte_rate": 20000.0},
        E({"user": "user2", "client-id": "clientA"}): {"producer_byte_rate": 10.0, "consumer_byte_rate": 20.0},
    }


def test_entity_forms_and_delete(capsys, url):
    base = ["--store", url, "--alter"]
    assert cli(capsys, *base, "--add-config", "consumer_byte_rate=2048", "--entity-type", "users", "--entity-name",
               "alice", "--entity-type", "clients", "--entity-default")[0] == 0
    assert cli(capsys, *base, "--add-config", "producer_byte_rate=1", "--entity-type", "users", "--entity-default",
               "--entity-type", "clients", "--entity-default")[0] == 0
    assert cli(capsys, *base, "--add-config", "producer_byte_rate=2", "--user", "bob", "--client", "c 1")[0] == 0
    assert cli(capsys, *base, "--add-config", "producer_byte_rate=3", "--client-defaults")[0] == 0
    assert cli(capsys, *base, "--add-config", "producer_byte_rate=4,request_percentage=12.5", "--user-defaults")[0] == 0
    assert cli(capsys, *base, "--add-config", "producer_byte_rate=5", "--user", "<default>")[0] == 0
    assert cli(capsys, *base, "--delete-config", "request_percentage", "--user-defaults")[0] == 0
    assert state(url) == {
        E({"user": "alice", "client-id": None}): {"consumer_byte_rate": 2048.0},
        E({"user": None, "client-id": None}): {"producer_byte_rate": 1.0},
        E({"user": "bob", "client-id": "c 1"}): {"producer_byte_rate": 2.0},
        E({"client-id": None}): {"producer_byte_rate": 3.0},
        E({"user": None}): {"producer_byte_rate": 4.0},
        E({"user": "<default>"}): {"producer_byte_rate": 5.0},
    }


def test_describe_table_and_filters(capsys, url):
    s = open_store(url)
    s.alter([
        ({"user": "alice"}, {"producer_byte_rate": 1024, "consumer_byte_rate": 2048}),
        ({"user": "alice", "client-id": "app"}, {"producer_byte_rate": 10}),
        ({"user": None, "client-id": None}, {"consumer_byte_rate": 7}),
        ({"client-id": "c1"}, {"request_percentage": 50.5}),
        ({"user": "<default>"}, {"producer_byte_rate": 3}),
    ])
    s.close()
    code, out, err = cli(capsys, "--store", url, "--describe")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["USER", "CLIENT-ID", "CONFIGS"]
    assert [line.split() for line in lines[1:]] == [
        ["<default>", "<default>", "consumer_byte_rate=7"],
        ['"<default>"', "-", "producer_byte_rate=3"],
        ["alice", "-", "producer_byte_rate=1024,consumer_byte_rate=2048"],
        ["alice", "app", "producer_byte_rate=10"],
        ["-", "c1", "request_percentage=50.5"],
    ]
    # Kafka's describe filters: users only, clients only, <user, client> pairs, one entity.
    def described(entity_type):
        out = cli(capsys, "--store", url, "--describe", "--entity-type", entity_type)[1]
        return [line.split()[:2] for line in out.splitlines()[1:]]

    assert described("users") == [['"<default>"', "-"], ["alice", "-"]]
    assert described("clients") == [["-", "c1"]]
    assert [line.split()[:2] for line in cli(capsys, "--store", url, "--describe", "--entity-type", "users",
                                             "--entity-type", "clients")[1].splitlines()[1:]] \
        == [["<default>", "<default>"], ["alice", "app"]]
    assert [line.split()[:2] for line in cli(capsys, "--store", url, "--describe", "--user", "alice")[1].splitlines()[1:]] \
        == [["alice", "-"]]
    assert [line.split()[:2] for line in cli(capsys, "--store", url, "--describe", "--entity-type", "users",
                                             "--entity-name", "alice", "--entity-type", "clients")[1].splitlines()[1:]] \
        == [["alice", "app"]]
    assert cli(capsys, "--store", url, "--describe", "--user", "nobody")[1] == "no quotas for users/nobody\n"


def test_describe_json_feeds_back_in(capsys, url, tmp_path):
    s = open_store(url)
    entries = [
        ({"user": "alice"}, {"producer_byte_rate": 1024}),
        ({"user": None, "client-id": None}, {"consumer_byte_rate": 2048}),
        ({"user": "x y", "client-id": "c/1"}, {"request_percentage": 12.5, "producer_byte_rate": 1235.0000001}),
    ]
    s.alter(entries)
    expected = s.describe()
    s.close()
    code, out, err = cli(capsys, "--store", url, "--describe", "--json")
    assert code == 0
    doc = json.loads(out)
    assert {"entity": {"user": None, "client-id": None}, "config": {"consumer_byte_rate": 2048}} in doc["quotas"]
    assert dict(parse_quota_config(doc)) == expected
    path = tmp_path / "out.json"
    path.write_text(out)
    other = "sqlite:///" + str(tmp_path / "copy.db")
    assert cli(capsys, "--store", other, "--alter", "--quota-file", str(path))[0] == 0
    assert state(other) == expected
    third = "sqlite:///" + str(tmp_path / "third.db")
    p = run_cli("--store", third, "--alter", "--quota-file", "-", stdin=out)
    assert p.returncode == 0, p.stderr
    assert state(third) == expected


def test_default_store_from_environment(tmp_path):
    url = "sqlite:///" + str(tmp_path / "env.db")
    p = run_cli("--alter", "--add-config", "producer_byte_rate=5", "--client", "c", env_extra={"KQUOTA_STORE": url})
    assert p.returncode == 0, p.stderr
    assert state(url) == {E({"client-id": "c"}): {"producer_byte_rate": 5.0}}
    p = run_cli("--describe", "--json", env_extra={"KQUOTA_STORE": url})
    assert json.loads(p.stdout) == {"quotas": [{"entity": {"client-id": "c"}, "config": {"producer_byte_rate": 5}}]}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--add-config", "producer_byte_rate=1.5", "--user", "a"], "whole number"),
        (["--add-config", "producer_byte_rate=abc", "--user", "a"], "not a number"),
        (["--add-config", "bogus=1", "--user", "a"], "bogus"),
        (["--add-config", "producer_byte_rate", "--user", "a"], "key=value"),
        (["--add-config", "producer_byte_rate=-5", "--user", "a"], "producer_byte_rate"),
        (["--add-config", "request_percentage=nan", "--user", "a"], "request_percentage"),
        (["--add-config", "producer_byte_rate=1", "--delete-config", "producer_byte_rate", "--user", "a"], "both"),
        (["--add-config", "producer_byte_rate=1", "--entity-type", "users"], "--entity-name"),
        (["--add-config", "producer_byte_rate=1"], "--entity-name"),
        (["--user", "a"], "--add-config"),
        (["--add-config", "producer_byte_rate=1", "--entity-name", "a"], "--entity-type"),
        (["--add-config", "producer_byte_rate=1", "--entity-type", "users", "--entity-type", "users",
          "--entity-name", "a", "--entity-name", "b"], "at most twice"),
        (["--add-config", "producer_byte_rate=1", "--user", "a", "--user-defaults"], "mutually exclusive"),
        (["--add-config", "producer_byte_rate=1", "--user", "a", "--entity-type", "clients",
          "--entity-name", "c"], "not both"),
        (["--add-config", "producer_byte_rate=1", "--entity-type", "users", "--entity-name", ""], "empty"),
        (["--quota-file", "/nonexistent/q.json"], "cannot read"),
    ],
)
def test_bad_alter_is_one_line_and_changes_nothing(tmp_path, args, message):
    url = "sqlite:///" + str(tmp_path / "q.db")
    s = open_store(url)
    s.alter([({"user": "a"}, {"producer_byte_rate": 7})])
    s.close()
    p = run_cli("--store", url, "--alter", *args)
    assert p.returncode == 1, p.stderr
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kquota: error:") and message in lines[0], p.stderr
    assert state(url) == {E({"user": "a"}): {"producer_byte_rate": 7.0}}


def test_bad_quota_file_changes_nothing(tmp_path):
    url = "sqlite:///" + str(tmp_path / "q.db")
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({"quotas": [{"entity": {"user": "ok"}, "config": {"producer_byte_rate": 1}},
                                        {"entity": {"user": "bad"}, "config": {"producer_byte_rate": 0}}]}))
    p = run_cli("--store", url, "--alter", "--quota-file", str(f))
    assert p.returncode == 1 and 'user="bad"' in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert state(url) == {}


@pytest.mark.parametrize("store", ["sqlite:///nonexistent-dir/q.db", "zookeeper://127.0.0.1:1", "kafka://127.0.0.1:1/quotas",
                                   "nope"])
def test_unreachable_store_is_one_line_with_url(store):
    p = run_cli("--store", store, "--describe", "--json")
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and store in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_usage_errors_exit_2():
    p = run_cli("--describe", "--alter")
    assert p.returncode == 2
    p = run_cli("--describe", "--entity-type", "brokers")
    assert p.returncode == 2
