"""The `kquota` CLI explains itself: --version, help (with defaults) for every subcommand and
option, short usage errors, clear `configs` answers, quota-file errors in the file's terms."""

import argparse
import json
import os
import subprocess
import sys

import pytest

import kquota
from kquota.cli import build_parser, main
from kquota.stores import open_store

pytestmark = pytest.mark.process


def kq(*args, cwd=None, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "kquota", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=120)


def _parsers(parser, path=("kquota",)):
    """Every (command path, parser) of the CLI, the top one included."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, path + (name,))


ALL = list(_parsers(build_parser()))


def test_version():
    p = kq("--version")
    assert p.returncode == 0 and p.stdout == f"kquota {kquota.__version__}\n"


def test_every_command_is_listed():
    names = {" ".join(path) for path, _ in ALL}
    assert {"kquota demo", "kquota configs", "kquota pipeline", "kquota pipeline generate", "kquota pipeline usage",
            "kquota pipeline simulate", "kquota pipeline recommend", "kquota pipeline report"} <= names


@pytest.mark.parametrize("path, parser", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_subcommand_and_option_has_help_with_its_default(path, parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                assert choice.help, f"{' '.join(path)} {choice.dest}: no help line"
            continue
        assert action.help and action.help.strip(), f"{' '.join(path)} {action.option_strings}: no help"
    text = parser.format_help()
    flat = " ".join(text.split())
    for action in parser._actions:
        d = action.default
        if not action.option_strings or d in (None, False, [], argparse.SUPPRESS):
            continue
        assert f"(default: {d})" in flat, f"{' '.join(path)} {action.option_strings[0]} hides its default {d!r}"


def test_pipeline_help_shows_meaning_and_defaults():
    p = kq("pipeline", "recommend", "-h")
    assert p.returncode == 0
    flat = " ".join(p.stdout.split())
    assert "percentile of each entity's per-second rates the quota starts from (default: 99.0)" in flat
    assert "factor applied to that percentile (default: 1.2)" in flat
    assert "(default: local[*])" in flat
    p = kq("pipeline", "generate", "-h")
    flat = " ".join(p.stdout.split())
    assert "number of brokers the requests are spread over (default: 4)" in flat
    assert "time span of the traffic, in seconds (default: 600)" in flat


@pytest.mark.parametrize("args, prog, needle", [
    (["demo", "--rows", "0"], "kquota demo", "must be >= 1"),
    (["configs"], "kquota configs", "--alter --describe --promote-shadow is required"),
    (["configs", "--describe", "--entity-type", "brokers"], "kquota configs", "invalid choice: 'brokers'"),
    (["pipeline"], "kquota pipeline", "required"),
    (["pipeline", "simulate", "--input", "x"], "kquota pipeline simulate", "--quotas"),
    (["nosuch"], "kquota", "invalid choice"),
    (["pipeline", "recommend", "--out", "x"], "kquota pipeline recommend", "exactly one of --input and --usage"),
])
def test_usage_errors_are_two_lines_without_the_usage_block(args, prog, needle):
    p = kq(*args)
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.splitlines()
    assert lines == [lines[0], f"(run '{prog} -h' for help)"], p.stderr
    assert lines[0].startswith(f"{prog}: error: ") and needle in lines[0], p.stderr
    assert "usage:" not in p.stderr


# ---------------------------------------------------------------------------- configs


def cli(capsys, *args):
    code = main(["configs", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_describe_says_when_nothing_matches_and_the_table_has_a_header(tmp_path, capsys):
    url = "sqlite:///" + str(tmp_path / "q.db")
    s = open_store(url)
    s.alter([({"user": "alice"}, {"producer_byte_rate": 1024})])
    s.close()
    assert cli(capsys, "--store", url, "--describe", "--client", "nobody") == (0, "no quotas for clients/nobody\n", "")
    assert cli(capsys, "--store", url, "--describe", "--user", "alice", "--client-defaults")[1] \
        == "no quotas for users/alice/clients/<default>\n"
    assert cli(capsys, "--store", url, "--describe", "--entity-type", "clients")[1] == "no quotas for clients/*\n"
    code, out, _ = cli(capsys, "--store", url, "--describe")
    assert out.splitlines() == ["USER   CLIENT-ID  CONFIGS", "alice  -          producer_byte_rate=1024"]
    empty = "sqlite:///" + str(tmp_path / "empty.db")
    s = open_store(empty)
    s.close()
    assert cli(capsys, "--store", empty, "--describe")[1] == f"no quotas in {empty}\n"


def test_describe_of_a_missing_store_says_so_and_creates_nothing(tmp_path):
    missing = tmp_path / "sub" / "typo.db"
    for args in (["--describe"], ["--describe", "--json"], ["--describe", "--user", "a"]):
        p = kq("configs", "--store", f"sqlite:///{missing}", *args)
        assert p.returncode == 1 and p.stdout == ""
        assert p.stderr.splitlines() == [f"kquota: error: no store at {missing} (sqlite:///{missing}): nothing to "
                                         "describe, nothing created (an --alter creates it)"]
    assert not missing.exists() and not missing.parent.exists()
    # A relative path is resolved against the working directory, and the message says where.
    p = kq("configs", "--store", "sqlite:///rel.db", "--describe", cwd=tmp_path)
    assert p.returncode == 1 and f"no store at {tmp_path / 'rel.db'}" in p.stderr
    assert not (tmp_path / "rel.db").exists()


def test_alter_on_a_new_path_says_where_the_store_was_created(tmp_path):
    p = kq("configs", "--store", "sqlite:///new.db", "--alter", "--add-config", "producer_byte_rate=5", "--user", "a",
           cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stderr == f"kquota configs: created a new store at {tmp_path / 'new.db'}\n"
    assert p.stdout == 'Completed updating config for user="a".\n'
    p = kq("configs", "--store", "sqlite:///new.db", "--alter", "--add-config", "producer_byte_rate=6", "--user", "a",
           cwd=tmp_path)
    assert p.returncode == 0 and p.stderr == ""  # an existing store: nothing to announce
    # With the default store (no --store, no $KQUOTA_STORE) the first alter names the file too.
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg")}
    p = subprocess.run([sys.executable, "-m", "kquota", "configs", "--alter", "--add-config", "producer_byte_rate=5",
                        "--user", "a"], capture_output=True, text=True,
                       env={k: v for k, v in {**os.environ, **env}.items() if k != "KQUOTA_STORE"})
    assert p.returncode == 0, p.stderr
    assert p.stderr == f"kquota configs: created a new store at {tmp_path / 'xdg' / 'kquota' / 'quotas.db'}\n"


BAD_FILES = [
    ({"quotas": [{"entity": {"user": "a"}, "config": {"producer_byte_rate": None}}]},
     'quotas[0] (user="a"), key producer_byte_rate: must be a number, got null'),
    ({"quotas": [{"entity": {"user": "a"}, "config": {"producer_byte_rate": "5"}}]},
     'quotas[0] (user="a"), key producer_byte_rate: must be a number, got a string'),
    ({"quotas": [{"entity": {"user": "a"}, "config": {"producer_byte_rate": True}}]},
     'quotas[0] (user="a"), key producer_byte_rate: must be a number, got true'),
    ({"quotas": [{"entity": {"user": "a"}, "config": {"producer_byte_rate": {"x": 1}}}]},
     'quotas[0] (user="a"), key producer_byte_rate: must be a number, got an object'),
    ({"quotas": [{"entity": {"user": "ok"}, "config": {"producer_byte_rate": 1}},
                 {"entity": {"user": "b"}, "config": {"consumer_byte_rate": 1.5}}]},
     'quotas[1] (user="b"), key consumer_byte_rate: must be a whole number of bytes per second, got 1.5'),
    ({"quotas": [{"entity": {"user": "a"}, "config": {"bogus": 1}}]}, 'quotas[0] (user="a"), key bogus: unknown'),
    ({"quotas": [{"entity": {"user": "a"}, "config": [1]}]},
     'quotas[0] (user="a"): "config" must be an object of config keys to numbers, got an array'),
    ({"quotas": [{"entity": None, "config": {}}]},
     'quotas[0]: "entity" must be an object with "user" and/or "client-id", or "ip", or "topic", got null'),
    ({"quotas": [{"entity": ["a"], "config": {}}]},
     'quotas[0]: "entity" must be an object with "user" and/or "client-id", or "ip", or "topic", got an array'),
    ({"quotas": [{"entity": {"user": 5}, "config": {}}]},
     'quotas[0]: entity "user" must be a string (or null for <default>), got a number'),
    ({"quotas": [{"entity": {"usr": "a"}, "config": {}}]},
     'quotas[0]: unknown entity key "usr" (expected "user" and/or "client-id", or "ip", or "topic")'),
    ({"quotas": [{"entity": {"user": ""}, "config": {}}]},
     'quotas[0]: entity "user" is empty (use null for the <default> entity)'),
    ({"quotas": [{"entity": {}, "config": {}}]}, 'quotas[0]: "entity" needs "user", "client-id" or both'),
]
PYTHON_WORDS = ("mappingproxy", "NoneType", "dict", "list", "str ", "bool", "Error", "Exception", "Traceback", "None")


@pytest.mark.parametrize("doc, expected", BAD_FILES)
def test_quota_file_errors_name_entry_and_key_in_json_terms(tmp_path, doc, expected):
    f = tmp_path / "q.json"
    f.write_text(json.dumps(doc))
    url = "sqlite:///" + str(tmp_path / "s.db")
    p = kq("configs", "--store", url, "--alter", "--quota-file", str(f))
    assert p.returncode == 1 and p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kquota: error: {f}: {expected}"), p.stderr
    for word in PYTHON_WORDS:
        assert word not in lines[0], (word, lines[0])
    assert not (tmp_path / "s.db").exists()  # refused before any store was opened


def test_metric_tags_print_as_plain_dicts():
    from kquota import ClientQuotaType as Q

    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    try:
        qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 1000})])
        qm.record_and_get_throttle_time_ms(Q.PRODUCE, "alice", "c", 10, now_ms=0)
        rows = qm.metrics(now_ms=0)
    finally:
        qm.close()
    assert rows and all(type(m.tags) is dict for m in rows)
    assert {"user": "alice", "client-id": ""} in [m.tags for m in rows]
    assert any(m.tags == {} for m in rows)
    text = repr(rows)
    assert "mappingproxy" not in text and "tags={}" in text
