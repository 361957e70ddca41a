"""The batch replay API (`kquota.pipeline.replay`, native `QuotaKernel._replay`) against per-request calls."""

import heapq

import numpy as np
import pytest

import kquota
from kquota.pipeline.replay import replay

CONFIG = [
    ({"user": "alice"}, {"producer_byte_rate": 20_000}),
    ({"user": "bob", "client-id": "b1"}, {"producer_byte_rate": 5_000, "consumer_byte_rate": 8_000}),
    ({"user": None, "client-id": None}, {"consumer_byte_rate": 15_000}),
    ({"client-id": "shared"}, {"producer_byte_rate": 12_000}),
]
ENTITIES = [("alice", "a1"), ("alice", "a2"), ("bob", "b1"), ("bob", "shared"), ("carol", ""), ("dave", "shared")]


def make_qm(config=CONFIG):
    qm = kquota.QuotaManager()
    qm.alter_client_quotas(config)
    return qm


def traffic(n=6000, seed=7, types=("PRODUCE", "FETCH")):
    rng = np.random.default_rng(seed)
    # Many equal timestamps: ties must be applied in array order.
    ts = np.sort(rng.integers(0, 40_000, n) // 7 * 7).astype(np.int64)
    ids = rng.integers(0, len(ENTITIES), n).astype(np.int32)
    qt = rng.choice(list(types), n)
    values = rng.integers(50, 4000, n).astype(np.float64)
    return ts, qt, ids, values


def test_open_model_equals_per_request_calls():
    ts, qt, ids, values = traffic()
    got = replay(make_qm(), ts, qt, ids, ENTITIES, values)
    qm = make_qm()
    want = [qm.record_and_get_throttle_time_ms(t, *ENTITIES[e], v, now_ms=int(s))
            for s, t, e, v in zip(ts, qt, ids, values)]
    assert got.dtype == np.int32
    assert got.tolist() == want
    assert sum(w > 0 for w in want) > 100  # the traffic is actually throttled


def closed_reference(qm, ts, qt, ids, values):
    """The closed model written plainly: per client a FIFO of its requests; the next request of
    a client is sent at max(its recorded time, previous send + previous throttle); all requests
    are recorded in (send time, array index) order."""
    n = len(ts)
    queues = {}
    for i in range(n):
        queues.setdefault(int(ids[i]), []).append(i)
    heap = [(int(ts[q[0]]), q[0], e, 0) for e, q in queues.items()]
    heapq.heapify(heap)
    throttle, sent = [0] * n, [0] * n
    while heap:
        at, i, e, k = heapq.heappop(heap)
        d = qm.record_and_get_throttle_time_ms(qt[i], *ENTITIES[e], values[i], now_ms=at)
        throttle[i], sent[i] = d, at
        if k + 1 < len(queues[e]):
            j = queues[e][k + 1]
            heapq.heappush(heap, (max(int(ts[j]), at + d), j, e, k + 1))
    return throttle, sent


def test_closed_model_equals_reference():
    ts, qt, ids, values = traffic(seed=11)
    got, sent = replay(make_qm(), ts, qt, ids, ENTITIES, values, model="closed", return_sent=True)
    want, want_sent = closed_reference(make_qm(), ts, qt, ids, values)
    assert got.tolist() == want
    assert sent.tolist() == want_sent
    assert (sent >= ts).all() and (sent > ts).sum() > 100  # throttled clients were pushed back
    # A client's requests keep their order.
    for e in range(len(ENTITIES)):
        s = sent[ids == e]
        assert (np.diff(s) >= 0).all()


def test_open_model_returns_recorded_times_as_send_times():
    ts, qt, ids, values = traffic(n=500)
    _, sent = replay(make_qm(), ts, qt, ids, ENTITIES, values, return_sent=True)
    assert sent.tolist() == ts.tolist()


def test_bad_value_raises_the_kernels_error_and_records_nothing():
    qm = make_qm()
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(kquota.QuotaValueError, match=r"request 2: recorded value must be a finite number"):
            replay(qm, [0, 1, 2], ["PRODUCE"] * 3, [0, 0, 0], ENTITIES, [10.0, 20.0, bad])
    assert qm.sensor_count(kquota.ClientQuotaType.PRODUCE) == 0
    with pytest.raises(kquota.QuotaValueError, match="now_ms must be within"):
        replay(qm, [0, 2**50], ["PRODUCE"] * 2, [0, 0], ENTITIES, [1.0, 1.0])


def test_native_argument_checks():
    qm = make_qm()
    n = 4
    ok = dict(ts=np.arange(n, dtype=np.int64), types=np.zeros(n, np.int8), ids=np.zeros(n, np.int32),
              values=np.ones(n), out=np.zeros(n, np.int32))

    def call(**kw):
        a = {**ok, **kw}
        qm._replay(a["ts"], a["types"], a["ids"], a["values"], ENTITIES, a["out"])

    call()
    with pytest.raises(TypeError, match="ts_ms must be a C-contiguous one-dimensional numpy array of dtype int64"):
        call(ts=np.arange(n, dtype=np.float64))
    with pytest.raises(TypeError, match="values .* dtype float64"):
        call(values=[1.0] * n)
    with pytest.raises(TypeError, match="entity_ids"):
        call(ids=np.zeros(2 * n, np.int32)[::2])
    readonly = np.zeros(n, np.int32)
    readonly.flags.writeable = False
    with pytest.raises(TypeError, match="writable"):
        call(out=readonly)
    with pytest.raises(ValueError, match="types has 3 elements but ts_ms has 4"):
        call(types=np.zeros(3, np.int8))
    with pytest.raises(ValueError, match=r"entity_ids\[1\] = 99 is not an index"):
        call(ids=np.array([0, 99, 0, 0], np.int32))
    with pytest.raises(ValueError, match=r"types\[0\] = 3 is not a quota type code"):
        call(types=np.array([3, 0, 0, 0], np.int8))


def test_python_wrapper_checks():
    qm = make_qm()
    with pytest.raises(ValueError, match="model must be"):
        replay(qm, [0], ["PRODUCE"], [0], ENTITIES, [1.0], model="half")
    with pytest.raises(ValueError, match="is not PRODUCE, FETCH or REQUEST"):
        replay(qm, [0], ["produce_x"], [0], ENTITIES, [1.0])
    with pytest.raises(TypeError, match="ts_ms must hold integers"):
        replay(qm, [0.5], ["PRODUCE"], [0], ENTITIES, [1.0])
    with pytest.raises(TypeError, match="values must be numbers"):
        replay(qm, [0], ["PRODUCE"], [0], ENTITIES, ["x"])
    # Names in any case, and codes, are accepted.
    assert replay(qm, [0, 1], ["produce", "Fetch"], [0, 0], ENTITIES, [1.0, 1.0]).tolist() == [0, 0]
    assert replay(qm, [2], np.array([1], np.int64), [0], ENTITIES, [1.0]).tolist() == [0]


def record_one(qm, qt, user, client, value, now):
    if qt.upper() == "REQUEST":
        return qm.record_request_time(user, client, value, now_ms=now)
    return qm.record_and_get_throttle_time_ms(qt, user, client, value, now_ms=now)


def test_request_rows_replay_as_record_request_time():
    config = [c for c in CONFIG if c[0] != {"user": "alice"}] + [
        ({"user": "alice"}, {"producer_byte_rate": 20_000, "request_percentage": 2.5}),
        ({"user": None}, {"request_percentage": 1.0}),
    ]
    ts, qt, ids, values = traffic(n=4000, seed=5, types=("PRODUCE", "FETCH", "REQUEST"))
    values = np.where(qt == "REQUEST", values * 500.0, values)  # 25 µs - 2 ms of thread time
    got = replay(make_qm(config), ts, qt, ids, ENTITIES, values)
    qm = make_qm(config)
    want = [record_one(qm, t, *ENTITIES[e], v, int(s)) for s, t, e, v in zip(ts, qt, ids, values)]
    assert got.tolist() == want
    assert sum(w > 0 for w, t in zip(want, qt) if t == "REQUEST") > 20
    got_closed = replay(make_qm(config), ts, qt, ids, ENTITIES, values, model="closed")
    assert got_closed.tolist() != got.tolist()


def test_request_rows_without_request_quotas_are_never_throttled():
    qm = make_qm()
    got = replay(qm, [0, 1, 2], ["REQUEST", "PRODUCE", "REQUEST"], [0, 0, 0], ENTITIES, [5e9, 10.0, 5e9])
    assert got.tolist() == [0, 0, 0]


def test_bad_request_time_raises_the_kernels_error():
    qm = make_qm(CONFIG + [({"user": "zed"}, {"request_percentage": 50})])
    with pytest.raises(kquota.QuotaValueError, match="request 1: thread time must be a finite number"):
        replay(qm, [0, 1], ["PRODUCE", "REQUEST"], [0, 0], ENTITIES, [10.0, -5.0])
    assert qm.sensor_count(kquota.ClientQuotaType.PRODUCE) == 0
