"""Per-request cost of ``record_and_get_throttle_time_ms`` from Python (pytest-benchmark).

Every variant is measured the same way in the same run:

* one benchmark round = a loop of ``CALLS`` calls to a callable bound to a local name
  beforehand; the reported per-call time is ``round median / CALLS`` for every variant, so the
  loop's own cost (``for t in range(...)``, ~10-15 ns) is included everywhere equally;
* the arguments are identical across variants of the same shape: quota type
  ``ClientQuotaType.PRODUCE``, user ``"alice"``, client-id ``"client-1"``, value ``100`` and an
  integer ``now_ms`` that advances by 1 ms per call (1000 calls per round = 1 s, so a quota
  sample window of 1 s rolls over about once per round) and never goes backwards across rounds;
* the ``*_clock`` variants pass ``now_ms=None`` (the kernel reads its own monotonic clock);
* every variant runs in ``PASSES`` passes (parameter ``pass_no``), each with fresh objects;
  ``conftest.py`` orders them pass by pass so drift of a shared machine hits all variants alike,
  and the report pools the rounds of all passes.

Configuration: one user quota ``users/alice`` = 10 MiB/s for PRODUCE. At 100 bytes per ms the
measured rate is ~100 kB/s, so the throttle stays 0; it does not matter for what is measured
(the sensor is recorded and checked on every call either way).

Nothing here asserts on timing: ``conftest.py`` turns the medians into ratios against the
targets and writes ``benches/results/python_record.{json,md}``.
"""

import pytest

pytest.importorskip("pytest_benchmark")

import kquota  # noqa: E402
from kquota import _kquota  # noqa: E402
from oracle import OracleQuotaManager  # noqa: E402  (tests/support/oracle.py, path set in conftest.py)

from bench_support import CALLS, PASSES, ROUNDS, WARMUP_ROUNDS, record_result  # noqa: E402

P = kquota.ClientQuotaType.PRODUCE
USER = "alice"
CLIENT_ID = "client-1"
VALUE = 100
QUOTA_BYTES_PER_SEC = 10 * 1024 * 1024
CONFIG = [({"user": USER}, {"producer_byte_rate": QUOTA_BYTES_PER_SEC})]


def empty(quota_type, user, client_id, value, now_ms=None):
    pass


def empty_handle(quota_type, value, now_ms=None):
    pass


# ------------------------------------------------------------------------------------ loops
# One loop shape per argument list. `clock` is a one-element list holding the next now_ms; every
# round consumes CALLS consecutive milliseconds, so time is monotonic over the whole benchmark.


def named_loop(fn, clock, n=CALLS, value=VALUE):
    def run():
        t0 = clock[0]
        clock[0] = t0 + n
        for t in range(t0, t0 + n):
            fn(P, USER, CLIENT_ID, value, t)

    return run


def handle_loop(fn, clock, n=CALLS, value=VALUE):
    def run():
        t0 = clock[0]
        clock[0] = t0 + n
        for t in range(t0, t0 + n):
            fn(P, value, t)

    return run


def named_loop_clock(fn, clock, n=CALLS, value=VALUE):
    def run():
        t0 = clock[0]
        clock[0] = t0 + n
        for t in range(t0, t0 + n):  # same loop as above; t unused
            fn(P, USER, CLIENT_ID, value, None)

    return run


def handle_loop_clock(fn, clock, n=CALLS, value=VALUE):
    def run():
        t0 = clock[0]
        clock[0] = t0 + n
        for t in range(t0, t0 + n):  # same loop as above; t unused
            fn(P, value, None)

    return run


def empty_loop(clock, n=CALLS):
    def run():
        t0 = clock[0]
        clock[0] = t0 + n
        for t in range(t0, t0 + n):
            pass

    return run


# --------------------------------------------------------------------------------- fixtures


@pytest.fixture
def qm():
    m = kquota.QuotaManager()
    m.alter_client_quotas(CONFIG)
    yield m
    m.close()


@pytest.fixture
def oracle_qm():
    m = OracleQuotaManager()
    m.alter_client_quotas(CONFIG)
    return m


def pytest_generate_tests(metafunc):
    # Every benchmark runs PASSES times; conftest.py interleaves the passes.
    if "pass_no" in metafunc.fixturenames:
        metafunc.parametrize("pass_no", range(PASSES), ids=[f"pass{i}" for i in range(PASSES)])


def _bench(benchmark, pass_no, variant, run, rounds=None, calls=CALLS):
    rounds = rounds or ROUNDS
    benchmark.group = "record_and_get_throttle_time_ms"
    benchmark.extra_info["calls_per_round"] = calls
    benchmark.pedantic(run, rounds=rounds, warmup_rounds=WARMUP_ROUNDS, iterations=1)
    record_result(variant, benchmark, pass_no)


def _check_realistic(benchmark, throttle, rate):
    """Stores (does not assert) that the measured path was the non-throttled one."""
    benchmark.extra_info["throttle_after_run_ms"] = throttle
    benchmark.extra_info["measured_rate_after_run"] = rate


# ------------------------------------------------------------------------------- benchmarks


def test_handle(benchmark, pass_no, qm):
    """(a) warm per-connection handle, explicit now_ms."""
    h = qm.client(USER, CLIENT_ID)
    clock = [0]
    fn = h.record_and_get_throttle_time_ms
    _bench(benchmark, pass_no, "handle", handle_loop(fn, clock))
    _check_realistic(benchmark, fn(P, VALUE, clock[0]), h.measured_rate(P, clock[0]))


def test_named(benchmark, pass_no, qm):
    """(b) named call on the manager, explicit now_ms."""
    clock = [0]
    fn = qm.record_and_get_throttle_time_ms
    _bench(benchmark, pass_no, "named", named_loop(fn, clock))
    _check_realistic(benchmark, fn(P, USER, CLIENT_ID, VALUE, clock[0]),
                     qm.measured_rate(P, USER, CLIENT_ID, clock[0]))


def test_empty_named_args(benchmark, pass_no):
    """(c) empty Python function, named call's arguments."""
    _bench(benchmark, pass_no, "empty_named_args", named_loop(empty, [0]))


def test_empty_handle_args(benchmark, pass_no):
    """(c) empty Python function, handle call's arguments."""
    _bench(benchmark, pass_no, "empty_handle_args", handle_loop(empty_handle, [0]))


def test_noop(benchmark, pass_no):
    """(d) native no-op with the handle call's arguments (PyO3 call floor)."""
    _bench(benchmark, pass_no, "noop", handle_loop(_kquota._noop, [0]))


def test_oracle_named(benchmark, pass_no, oracle_qm):
    """(e) pure-Python oracle, named call."""
    clock = [0]
    fn = oracle_qm.record_and_get_throttle_time_ms
    _bench(benchmark, pass_no, "oracle_named", named_loop(fn, clock), rounds=max(20, ROUNDS // 10))
    _check_realistic(benchmark, fn(P, USER, CLIENT_ID, VALUE, clock[0]),
                     oracle_qm.measured_rate(P, USER, CLIENT_ID, clock[0]))


def test_oracle_handle(benchmark, pass_no, oracle_qm):
    """(info) pure-Python oracle through its handle."""
    h = oracle_qm.client(USER, CLIENT_ID)
    _bench(benchmark, pass_no, "oracle_handle", handle_loop(h.record_and_get_throttle_time_ms, [0]),
           rounds=max(20, ROUNDS // 10))


def test_noop_float_value(benchmark, pass_no):
    """(info) `_noop` with value=100.0 (a float): shows what converting the int 100 costs."""
    _bench(benchmark, pass_no, "noop_float_value", handle_loop(_kquota._noop, [0], value=float(VALUE)))


def test_handle_float_value(benchmark, pass_no, qm):
    """(info) handle with value=100.0 (a float) instead of the int 100."""
    h = qm.client(USER, CLIENT_ID)
    _bench(benchmark, pass_no, "handle_float_value",
           handle_loop(h.record_and_get_throttle_time_ms, [0], value=float(VALUE)))


def test_handle_kernel_clock(benchmark, pass_no, qm):
    """(a') handle with now_ms=None: the kernel reads CLOCK_MONOTONIC."""
    h = qm.client(USER, CLIENT_ID)
    fn = h.record_and_get_throttle_time_ms
    _bench(benchmark, pass_no, "handle_clock", handle_loop_clock(fn, [0]))
    _check_realistic(benchmark, fn(P, VALUE, None), h.measured_rate(P, None))


def test_named_kernel_clock(benchmark, pass_no, qm):
    """(b') named call with now_ms=None."""
    fn = qm.record_and_get_throttle_time_ms
    _bench(benchmark, pass_no, "named_clock", named_loop_clock(fn, [0]))
    _check_realistic(benchmark, fn(P, USER, CLIENT_ID, VALUE, None),
                     qm.measured_rate(P, USER, CLIENT_ID, None))


def test_empty_loop(benchmark, pass_no):
    """(info) the loop alone, no call: the part of every per-call figure that is not the call."""
    _bench(benchmark, pass_no, "loop_only", empty_loop([0]))


def test_connection(benchmark, pass_no):
    """(KIP-612) the connection quotas' whole cost for one connection, as a server pays it: the
    broker-wide / listener rate, the address's rate and count, and the count back on close; the
    address has a quota (1000 connections per ms never reach it: 1 call per ms)."""
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    qm.alter_client_quotas([({"ip": "127.0.0.2"}, {"connection_creation_rate": 100_000})])
    qm.configure_connections({"max.connection.creation.rate": 100_000, "max.connections.per.ip": 1000})
    accept, admit, release = qm.record_connection_accept, qm.record_connection, qm.release_connection
    clock = [0]

    def run():
        t0 = clock[0]
        clock[0] = t0 + CALLS
        for t in range(t0, t0 + CALLS):
            accept("", t)
            admit("127.0.0.2", t)
            release("127.0.0.2")

    _bench(benchmark, pass_no, "connection", run)
    benchmark.extra_info["throttle_after_run_ms"] = admit("127.0.0.2", clock[0])
    qm.close()


def test_tcp_connect(benchmark, pass_no):
    """(KIP-612 floor) a loopback TCP connection's own cost, from the same process: connect,
    accept, close both sockets. Fewer calls per round (a connection is ~1000x a record)."""
    import socket

    calls = max(10, CALLS // 20)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(128)
    addr = server.getsockname()

    def run():
        for _ in range(calls):
            c = socket.create_connection(addr)
            s, _peer = server.accept()
            # The accepted end first: its TIME_WAIT never blocks the client's next port.
            s.close()
            c.close()

    try:
        _bench(benchmark, pass_no, "tcp_connect", run, rounds=max(20, ROUNDS // 20), calls=calls)
    finally:
        server.close()


# ----------------------------------------------------------------- sanity (correctness only)


def test_bench_schedule_matches_oracle():
    """The benchmarked schedule gives the same throttles in kquota (handle and named) and in the
    oracle, and they are all 0 -- i.e. the timed path is the realistic, non-throttled one.
    (A correctness check on the benchmark's input, not a timing assertion.)"""
    qm = kquota.QuotaManager()
    qm.alter_client_quotas(CONFIG)
    oq = OracleQuotaManager()
    oq.alter_client_quotas(CONFIG)
    h = qm.client(USER, CLIENT_ID)
    n = 30_000  # 30 s of schedule: every sample window rolls many times
    got_h, got_n, want = [], [], []
    for t in range(n):
        got_h.append(h.record_and_get_throttle_time_ms(P, VALUE, t))
        want.append(oq.record_and_get_throttle_time_ms(P, USER, CLIENT_ID, VALUE, t))
    qm2 = kquota.QuotaManager()
    qm2.alter_client_quotas(CONFIG)
    for t in range(n):
        got_n.append(qm2.record_and_get_throttle_time_ms(P, USER, CLIENT_ID, VALUE, t))
    assert got_h == want
    assert got_n == want
    assert set(want) == {0}
    qm.close()
    qm2.close()
