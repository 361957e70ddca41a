"""The quota configuration file of docs/pipeline.md: round trip and validation."""

import json

import pytest

import kquota
from kquota.config_file import dump_quota_config, load_quota_config, parse_quota_config

SPEC_EXAMPLE = {
    "quotas": [
        {"entity": {"user": "alice"}, "config": {"producer_byte_rate": 1024}},
        {"entity": {"user": None, "client-id": None}, "config": {"consumer_byte_rate": 2048}},
    ]
}


def test_spec_example_loads_and_applies(tmp_path):
    p = tmp_path / "q.json"
    p.write_text(json.dumps(SPEC_EXAMPLE))
    entries = load_quota_config(p)
    qm = kquota.QuotaManager()
    qm.alter_client_quotas(entries)
    assert qm.quota_limit(kquota.ClientQuotaType.PRODUCE, "alice", "x") == 1024.0
    assert qm.quota_limit(kquota.ClientQuotaType.FETCH, "bob", "y") == 2048.0


def test_round_trip_is_identical(tmp_path):
    p = tmp_path / "q.json"
    dump_quota_config(parse_quota_config(SPEC_EXAMPLE), p)
    assert json.loads(p.read_text()) == SPEC_EXAMPLE


@pytest.mark.parametrize(
    "doc, needle",
    [
        ({}, '"quotas"'),
        ({"quotas": [{"entity": {"user": "a"}}]}, "quotas[0]"),
        ({"quotas": [{"entity": {"group": "a"}, "config": {}}]}, "group"),
        ({"quotas": [{"entity": {"user": "a"}, "config": {"producer_byte_rate": -1}}]}, "producer_byte_rate"),
        ({"quotas": [{"entity": {"user": "a"}, "config": {"bogus": 1}}]}, "bogus"),
        (
            {"quotas": [{"entity": {"user": "a"}, "config": {}}, {"entity": {"user": "a"}, "config": {}}]},
            "twice",
        ),
    ],
)
def test_bad_documents_name_the_problem(doc, needle):
    with pytest.raises(kquota.QuotaConfigError, match=None) as ei:
        parse_quota_config(doc, source="f.json")
    assert needle in str(ei.value) and "f.json" in str(ei.value)


def test_unreadable_and_invalid_json(tmp_path):
    with pytest.raises(kquota.QuotaConfigError, match="cannot read"):
        load_quota_config(tmp_path / "missing.json")
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(kquota.QuotaConfigError, match="not valid JSON"):
        load_quota_config(p)
