"""Kafka's rules have one source, the kernel: the Python layer's sanitizer, precedence walk,
config keys and alter validation are the native ones, and behave as the kernel does."""

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kquota
import kquota.aio
from kquota import QuotaConfigError, QuotaManager, QuotaValueError, _kquota
from kquota.plugins._configured import ConfiguredQuotas
from kquota.quota_type import ClientQuotaType, coerce_quota_type
from kquota.sanitizer import sanitize
from kquota.stores import sanitize as store_sanitize
from kquota.validation import CONFIG_KEYS, validate_alter

Q = ClientQuotaType


def test_one_sanitizer_everywhere():
    assert sanitize is _kquota.sanitize is store_sanitize
    assert sanitize("CN=a b*~+é") == "CN%3Da%20b%2A%7E%2B%C3%A9"
    # A lone surrogate is '?' as Java's encoder writes it; the old plugin copy raised here.
    assert sanitize("a\udc80b") == "a%3Fb"


def test_config_keys_come_from_the_kernel():
    assert CONFIG_KEYS == kquota.CONFIG_KEYS == tuple(t.config_key for t in Q.members())


def test_validate_alter_builds_no_manager_and_starts_no_thread(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("validate_alter built a QuotaManager")

    monkeypatch.setattr(QuotaManager, "__init__", boom)
    before = threading.active_count()
    assert validate_alter([({"user": "u"}, {"producer_byte_rate": 1024, "request_percentage": None})]) == [
        (kquota.ClientQuotaEntity({"user": "u"}), {"producer_byte_rate": 1024.0, "request_percentage": None})
    ]
    assert threading.active_count() == before


@pytest.mark.parametrize("ops, message", [
    ({"producer_byte_rate": 1.5}, "whole number"),
    ({"request_percentage": 1101}, "at most (num_io_threads + num_network_threads) * 100 = 1100"),
    ({"bogus": 1}, "unknown config key"),
    ({"consumer_byte_rate": True}, "must be a number"),
])
def test_validate_alter_matches_the_default_manager(ops, message):
    entries = [({"user": "u"}, ops)]
    with pytest.raises(QuotaConfigError, match="user=\"u\"") as store_error:
        validate_alter(entries)
    assert message in str(store_error.value)
    with QuotaManager(expiry_interval_seconds=None) as qm, pytest.raises(QuotaConfigError) as qm_error:
        qm.alter_client_quotas(entries, validate_only=True)
    assert str(qm_error.value) == str(store_error.value)


def test_native_validation_rejects_unknown_kinds_and_keys_with_kquota_errors():
    with pytest.raises(QuotaConfigError, match="unknown entity kind 7"):
        _kquota.validate_quota_changes([(7, "u", 0, "", "producer_byte_rate", 1.0)])
    with pytest.raises(QuotaConfigError, match='key bogus: unknown config key'):
        _kquota.validate_quota_changes([(2, "u", 0, "", "bogus", 1.0)])


def test_unknown_quota_types_raise_quota_value_error_with_one_message():
    messages = set()
    with QuotaManager(expiry_interval_seconds=None) as qm:
        for call in (
            lambda: qm.quota_limit("BOGUS", "u", "c"),
            lambda: qm.delay_queue("BOGUS"),
            lambda: qm.sensor_stats("BOGUS"),
            lambda: qm.signal_quota_reset("BOGUS"),
            lambda: coerce_quota_type("BOGUS"),
            lambda: kquota.aio.DelayQueue("BOGUS"),
        ):
            with pytest.raises(QuotaValueError) as e:
                call()
            messages.add(str(e.value))
    assert messages == {'unknown quota type "BOGUS"; expected one of PRODUCE, FETCH, REQUEST, CONTROLLER_MUTATION'}
    with pytest.raises(QuotaValueError, match="lone surrogate"):
        coerce_quota_type("PRODUCE\udc80")
    with pytest.raises(TypeError, match="quota_type must be a kquota.ClientQuotaType"):
        coerce_quota_type(0)
    assert coerce_quota_type("fetch") is Q.FETCH and coerce_quota_type(Q.REQUEST) is Q.REQUEST

NAMES = st.sampled_from(["u", "v", "a b", "<default>"])
CLIENTS = st.sampled_from(["c", "d"])
SIDE = st.one_of(st.none(), st.just("<default>"), NAMES)


def _entity(user_side, client_side):
    entries = {}
    for key, side in (("user", user_side), ("client-id", client_side)):
        if side is not None:
            entries[key] = None if side == "<default>" else side
    return entries


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(SIDE, st.one_of(st.none(), st.just("<default>"), CLIENTS),
                          st.integers(1, 9), st.booleans()), max_size=8),
       NAMES, CLIENTS)
def test_plugin_walk_is_the_kernels_walk(steps, user, client):
    """ConfiguredQuotas answers as the kernel does once every kind of level was configured
    (the kernel then always walks; the plugin table always walks)."""
    configured = ConfiguredQuotas()
    with QuotaManager(expiry_interval_seconds=None) as qm:
        # Every kind configured once (on names no request uses), so the kernel walks too.
        seed = [({"user": "seed-u"}, {"producer_byte_rate": 1}),
                ({"client-id": "seed-c"}, {"producer_byte_rate": 1}),
                ({"user": "seed-u", "client-id": "seed-c"}, {"producer_byte_rate": 1})]
        qm.alter_client_quotas(seed)
        for entity, ops in seed:
            configured.update(Q.PRODUCE, kquota.ClientQuotaEntity(entity), ops["producer_byte_rate"])
        for user_side, client_side, value, remove in steps:
            entity = _entity(user_side, client_side)
            if not entity:
                continue
            qm.alter_client_quotas([(entity, {"producer_byte_rate": None if remove else value})])
            if remove:
                configured.remove(Q.PRODUCE, kquota.ClientQuotaEntity(entity))
            else:
                configured.update(Q.PRODUCE, kquota.ClientQuotaEntity(entity), value)
        tags = configured.metric_tags(Q.PRODUCE, user, client)
        assert tags == qm.quota_metric_tags(Q.PRODUCE, user, client)
        assert configured.limit(Q.PRODUCE, tags) == qm.quota_limit(Q.PRODUCE, user, client)


def test_manager_dir_shows_no_private_helpers():
    with QuotaManager(expiry_interval_seconds=None) as qm:
        names = dir(qm)
        assert [n for n in names if n.startswith("_") and not n.startswith("__")] == []
        for public in ("alter_client_quotas", "record_and_get_throttle_time_ms", "client", "metrics",
                       "delay_queue_metrics", "extra_metrics", "__enter__"):
            assert public in names
        # Still reachable for the package's own use.
        assert callable(qm._describe)
