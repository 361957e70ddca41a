"""Random interleavings of configuration changes and per-request calls: kquota == oracle."""

import math
import os

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from oracle import OracleQuotaManager

USERS = ["alice", "bob", "<default>", "c d"]  # "<default>" here is a literal user name
CLIENTS = ["c1", "c2", ""]
ABSENT = "absent"
ENTITY_USERS = [ABSENT, None, "alice", "bob", "<default>", "c d"]  # None = <default> entity
ENTITY_CLIENTS = [ABSENT, None, "c1", "c2"]
KEYS = ["producer_byte_rate", "consumer_byte_rate"]
TYPES = ["PRODUCE", "FETCH"]


def _entity(pair):
    user, client = pair
    mapping = {}
    if user != ABSENT:
        mapping["user"] = user
    if client != ABSENT:
        mapping["client-id"] = client
    return mapping


entities = st.tuples(st.sampled_from(ENTITY_USERS), st.sampled_from(ENTITY_CLIENTS)).filter(
    lambda p: p != (ABSENT, ABSENT))
ops = st.dictionaries(st.sampled_from(KEYS),
                      st.one_of(st.integers(1, 5000), st.integers(1, 5000), st.none()),
                      min_size=1, max_size=2)
alter_steps = st.tuples(
    st.just("alter"),
    st.lists(st.tuples(entities, ops), min_size=1, max_size=3, unique_by=lambda e: e[0]),
    st.sampled_from([False] * 9 + [True]),  # validate_only
)
time_steps = st.one_of(
    st.integers(0, 300), st.integers(0, 3000), st.integers(0, 3000), st.integers(3000, 40_000),
    st.integers(-800, -1),
)
request_steps = st.tuples(
    st.sampled_from(["record", "record", "record", "no_throttle", "unrecord", "measure"]),
    st.sampled_from(TYPES),
    st.sampled_from(USERS),
    st.sampled_from(CLIENTS),
    # Mostly whole bytes; sometimes fractional values, whose double sums depend on Kafka's
    # slot order (the kernel's exact-integer fast path must not apply to them).
    st.one_of(st.integers(0, 20_000), st.integers(0, 20_000),
              st.integers(0, 200_000).map(lambda n: n / 10)),
    time_steps,
    st.booleans(),  # through a handle
    st.tuples(st.sampled_from(TYPES), st.sampled_from(USERS), st.sampled_from(CLIENTS)),  # probe
)
steps = st.lists(st.one_of(request_steps, request_steps, request_steps, alter_steps),
                 min_size=1, max_size=40)
configs = st.fixed_dictionaries(
    {"window_num": st.integers(1, 12), "window_size_seconds": st.integers(1, 3)},
    optional={"producer_default": st.integers(1, 5000), "consumer_default": st.integers(1, 5000)},
)


def _describe_kquota(qm):
    return {tuple(sorted(e.entries.items())): dict(v) for e, v in qm.describe_client_quotas().items()}


def _same_float(a, b):
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=1e-9)


@settings(max_examples=int(os.environ.get("KQ_HYPOTHESIS_EXAMPLES", "150")), deadline=None, database=None,
          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],  # no patch files
          suppress_health_check=[HealthCheck.too_slow])
@given(config=configs, program=steps, start=st.integers(0, 10_000))
def test_kquota_matches_oracle(config, program, start):
    import kquota as kq

    qm = kq.QuotaManager(**config)
    oracle = OracleQuotaManager(**config)
    qtype = {"PRODUCE": kq.ClientQuotaType.PRODUCE, "FETCH": kq.ClientQuotaType.FETCH}
    handles = {}
    t = start
    try:
        for i, step in enumerate(program):
            where = f"step {i}: {step!r} at t={t}"
            if step[0] == "alter":
                _, entries, validate_only = step
                entries = [(_entity(e), dict(o)) for e, o in entries]
                qm.alter_client_quotas(entries, validate_only=validate_only)
                oracle.alter_client_quotas(entries, validate_only=validate_only)
                assert _describe_kquota(qm) == oracle.describe_client_quotas(), where
                probe = None
            else:
                kind, tname, user, client, value, dt, via_handle, probe = step
                t = max(0, t + dt)
                where = f"step {i}: {step!r} at t={t}"
                qt = qtype[tname]
                if via_handle:
                    h = handles.get((user, client))
                    if h is None:
                        h = handles[(user, client)] = qm.client(user, client)
                    k_calls = {
                        "record": lambda: h.record_and_get_throttle_time_ms(qt, value, now_ms=t),
                        "no_throttle": lambda: h.record_no_throttle(qt, value, now_ms=t),
                        "unrecord": lambda: h.unrecord(qt, value, now_ms=t),
                        "measure": lambda: h.measured_rate(qt, now_ms=t),
                    }
                else:
                    k_calls = {
                        "record": lambda: qm.record_and_get_throttle_time_ms(
                            qt, user, client, value, now_ms=t),
                        "no_throttle": lambda: qm.record_no_throttle(qt, user, client, value,
                                                                     now_ms=t),
                        "unrecord": lambda: qm.unrecord(qt, user, client, value, now_ms=t),
                        "measure": lambda: qm.measured_rate(qt, user, client, now_ms=t),
                    }
                o_calls = {
                    "record": lambda: oracle.record_and_get_throttle_time_ms(
                        tname, user, client, value, t),
                    "no_throttle": lambda: oracle.record_no_throttle(tname, user, client, value, t),
                    "unrecord": lambda: oracle.unrecord(tname, user, client, value, t),
                    "measure": lambda: oracle.measured_rate(tname, user, client, t),
                }
                got, want = k_calls[kind](), o_calls[kind]()
                if kind == "record":
                    assert type(got) is int, where
                    assert got == want, where
                elif kind == "measure":
                    assert _same_float(got, want), (where, got, want)
                else:
                    assert got is None, where

            # after every step: tags and limits everywhere, one measured rate
            for tname in TYPES:
                for user in USERS:
                    for client in CLIENTS:
                        qt = qtype[tname]
                        ctx = (where, tname, user, client)
                        assert qm.quota_metric_tags(qt, user, client) == \
                            oracle.quota_metric_tags(tname, user, client), ctx
                        assert qm.quota_limit(qt, user, client) == \
                            oracle.quota_limit(tname, user, client), ctx
            if probe is None:
                probe = ("PRODUCE", "alice", "c1")
            ptname, puser, pclient = probe
            got = qm.measured_rate(qtype[ptname], puser, pclient, now_ms=t)
            want = oracle.measured_rate(ptname, puser, pclient, t)
            assert _same_float(got, want), (where, probe, got, want)
            assert _same_float(qm.max_value_in_quota_window(qtype[ptname], puser, pclient),
                               oracle.max_value_in_quota_window(ptname, puser, pclient)), where
    finally:
        qm.close()
