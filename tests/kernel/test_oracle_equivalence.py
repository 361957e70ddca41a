"""Random interleavings of configuration changes and per-request calls: kquota == oracle.

Covers the byte-rate types, request-time quotas (I/O and network thread time, exempt time, the
generic calls in percent) and controller-mutation quotas (permissive, strict, generic, unrecord,
tokens), through named calls and handles, with times that sometimes go backwards.
"""

import math
import os

from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from oracle import OracleQuotaManager, ThrottlingQuotaExceeded

USERS = ["alice", "bob", "<default>", "c d"]  # "<default>" here is a literal user name
CLIENTS = ["c1", "c2", ""]
ABSENT = "absent"
ENTITY_USERS = [ABSENT, None, "alice", "bob", "<default>", "c d"]  # None = <default> entity
ENTITY_CLIENTS = [ABSENT, None, "c1", "c2"]
# Requests come mostly from alice/c1 so that a configured quota is often the one that applies.
users = st.one_of(st.just("alice"), st.sampled_from(USERS))
clients = st.one_of(st.just("c1"), st.sampled_from(CLIENTS))
KEYS = ["producer_byte_rate", "consumer_byte_rate", "request_percentage",
        "controller_mutation_rate"]
TYPES = ["PRODUCE", "FETCH", "REQUEST", "CONTROLLER_MUTATION"]
# Valid values per key: whole byte rates; percentages up to the default capacity (8 + 3 threads
# -> 1100 %) and mutation rates, both sometimes small and fractional so that throttles and strict
# rejections are common.
VALUES = {
    "producer_byte_rate": st.integers(1, 5000),
    "consumer_byte_rate": st.integers(1, 5000),
    "request_percentage": st.one_of(st.integers(1, 1100), st.integers(1, 500).map(lambda v: v / 100)),
    "controller_mutation_rate": st.one_of(st.integers(1, 50),
                                          st.integers(1, 500).map(lambda v: v / 100)),
}


def _entity(pair):
    user, client = pair
    mapping = {}
    if user != ABSENT:
        mapping["user"] = user
    if client != ABSENT:
        mapping["client-id"] = client
    return mapping


entities = st.tuples(st.one_of(st.sampled_from([None, "alice"]), st.sampled_from(ENTITY_USERS)),
                     st.sampled_from(ENTITY_CLIENTS)).filter(
    lambda p: p != (ABSENT, ABSENT))
ops = st.lists(st.one_of(*[st.tuples(st.just(k), st.one_of(v, v, st.none())) for k, v in VALUES.items()]),
               min_size=1, max_size=2, unique_by=lambda kv: kv[0]).map(dict)
alter_steps = st.tuples(
    st.just("alter"),
    st.lists(st.tuples(entities, ops), min_size=1, max_size=3, unique_by=lambda e: e[0]),
    st.sampled_from([False] * 9 + [True]),  # validate_only
)
time_steps = st.one_of(
    st.just(0), st.integers(0, 300), st.integers(0, 300), st.integers(0, 3000),
    st.integers(0, 3000), st.integers(3000, 40_000), st.integers(-800, -1),
)
request_steps = st.tuples(
    st.sampled_from(["record", "record", "record", "no_throttle", "unrecord", "measure",
                     "request_time", "request_time", "network_time", "exempt",
                     "mutations", "mutations", "mutations_strict", "mutations_strict", "tokens"]),
    st.sampled_from(TYPES),
    users,
    clients,
    # Mostly whole bytes; sometimes fractional values, whose double sums depend on Kafka's
    # slot order (the kernel's exact-integer fast path must not apply to them).
    st.one_of(st.integers(0, 20_000), st.integers(0, 20_000),
              st.integers(0, 200_000).map(lambda n: n / 10)),
    time_steps,
    st.booleans(),  # through a handle
    st.tuples(st.sampled_from(TYPES), st.sampled_from(USERS), st.sampled_from(CLIENTS)),  # probe
)
# Usually some quotas first (else most programs would record against nothing), not always.
steps = st.tuples(
    st.one_of(alter_steps.map(lambda a: [a]), alter_steps.map(lambda a: [a]), st.just([])),
    st.lists(st.integers(0, 5).flatmap(lambda i: alter_steps if i == 0 else request_steps),
             min_size=4, max_size=40),
).map(lambda p: p[0] + p[1])
configs = st.fixed_dictionaries(
    {"window_num": st.integers(1, 12), "window_size_seconds": st.integers(1, 3)},
    optional={"producer_default": st.integers(1, 5000), "consumer_default": st.integers(1, 5000)},
)


def _describe_kquota(qm):
    return {tuple(sorted(e.entries.items())): dict(v) for e, v in qm.describe_client_quotas().items()}


def _outcome(call, kq):
    """A call's return value, or ("raised", throttle_time_ms) for a strict rejection."""
    try:
        return call()
    except kq.ThrottlingQuotaExceededError as e:
        return ("raised", e.throttle_time_ms)
    except ThrottlingQuotaExceeded as e:
        return ("raised", e.throttle_time_ms)


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
    qtype = {name: getattr(kq.ClientQuotaType, name) for name in TYPES}
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
                nanos = value * 10_000  # up to 200 ms of thread time
                mutations = value / 10
                if via_handle:
                    h = handles.get((user, client))
                    if h is None:
                        h = handles[(user, client)] = qm.client(user, client)
                    k_calls = {
                        "record": lambda: h.record_and_get_throttle_time_ms(qt, value, now_ms=t),
                        "no_throttle": lambda: h.record_no_throttle(qt, value, now_ms=t),
                        "unrecord": lambda: h.unrecord(qt, value, now_ms=t),
                        "measure": lambda: h.measured_rate(qt, now_ms=t),
                        "request_time": lambda: h.record_request_time(nanos, now_ms=t),
                        "network_time": lambda: h.record_network_thread_time(nanos, now_ms=t),
                        "mutations": lambda: h.record_controller_mutations(mutations, now_ms=t),
                        "mutations_strict": lambda: h.record_controller_mutations(
                            mutations, now_ms=t, strict=True),
                        "tokens": lambda: h.controller_mutation_tokens(now_ms=t),
                    }
                else:
                    k_calls = {
                        "record": lambda: qm.record_and_get_throttle_time_ms(
                            qt, user, client, value, now_ms=t),
                        "no_throttle": lambda: qm.record_no_throttle(qt, user, client, value,
                                                                     now_ms=t),
                        "unrecord": lambda: qm.unrecord(qt, user, client, value, now_ms=t),
                        "measure": lambda: qm.measured_rate(qt, user, client, now_ms=t),
                        "request_time": lambda: qm.record_request_time(user, client, nanos,
                                                                       now_ms=t),
                        "network_time": lambda: qm.record_network_thread_time(user, client, nanos,
                                                                              now_ms=t),
                        "mutations": lambda: qm.record_controller_mutations(
                            user, client, mutations, now_ms=t),
                        "mutations_strict": lambda: qm.record_controller_mutations(
                            user, client, mutations, now_ms=t, strict=True),
                        "tokens": lambda: qm.controller_mutation_tokens(user, client, now_ms=t),
                    }
                k_calls["exempt"] = lambda: qm.record_exempt_request_time(nanos, now_ms=t)
                o_calls = {
                    "record": lambda: oracle.record_and_get_throttle_time_ms(
                        tname, user, client, value, t),
                    "no_throttle": lambda: oracle.record_no_throttle(tname, user, client, value, t),
                    "unrecord": lambda: oracle.unrecord(tname, user, client, value, t),
                    "measure": lambda: oracle.measured_rate(tname, user, client, t),
                    "request_time": lambda: oracle.record_request_time(user, client, nanos, t),
                    "network_time": lambda: oracle.record_network_thread_time(user, client, nanos,
                                                                              t),
                    "exempt": lambda: oracle.record_exempt_request_time(nanos, t),
                    "mutations": lambda: oracle.record_controller_mutations(
                        user, client, mutations, t),
                    "mutations_strict": lambda: oracle.record_controller_mutations(
                        user, client, mutations, t, strict=True),
                    "tokens": lambda: oracle.controller_mutation_tokens(user, client, t),
                }
                got, want = _outcome(k_calls[kind], kq), _outcome(o_calls[kind], kq)
                if kind in ("record", "request_time", "mutations", "mutations_strict"):
                    assert type(got) in (int, tuple), where
                    assert got == want, (where, got, want)
                    if isinstance(got, tuple):
                        event(f"{kind}: strict rejection")
                    elif got > 0:
                        event(f"{kind} {tname if kind == 'record' else ''}: throttled")
                elif kind == "measure":
                    assert _same_float(got, want), (where, got, want)
                elif kind == "tokens":
                    assert got == want, (where, got, want)  # same refills: bit-identical
                else:
                    assert got is None and want is None, where

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
            if ptname == "CONTROLLER_MUTATION":
                got = qm.controller_mutation_tokens(puser, pclient, now_ms=t)
                want = oracle.controller_mutation_tokens(puser, pclient, t)
                assert got == want, (where, probe, got, want)
            if ptname == "REQUEST":
                got, want = qm.exempt_request_rate(now_ms=t), oracle.exempt_request_rate(t)
                assert _same_float(got, want), (where, got, want)
    finally:
        qm.close()
