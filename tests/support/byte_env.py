"""What the byte-rate semantics tests share (tests/kernel/test_byte_*.py): the ``env`` fixture,
which binds one implementation (kquota or the oracle) and one byte-rate quota type, and the
entities the cases use."""

import pytest

from conftest import BYTE_KEY, OTHER, close_managers

STATIC_KW = {"PRODUCE": "producer_default", "FETCH": "consumer_default"}

U, C = "alice", "c1"
CLIENT_DEFAULT = {"client-id": None}
USER_DEFAULT = {"user": None}


def T(user, client_id):
    return {"user": user, "client-id": client_id}


class Env:
    """Binds one implementation and one quota type; small helpers keep the tests readable."""

    def __init__(self, impl, qt_name):
        self.impl = impl
        self.qt_name = qt_name
        self.qt = impl.qtype(qt_name)
        self.key = BYTE_KEY[qt_name]
        self.other_qt = impl.qtype(OTHER[qt_name])
        self.other_key = BYTE_KEY[OTHER[qt_name]]
        self.made = []

    def make(self, static=None, **kwargs):
        if static is not None:
            kwargs[STATIC_KW[self.qt_name]] = static
        qm = self.impl.make(**kwargs)
        self.made.append(qm)
        return qm

    def set(self, qm, entity, value, key=None):
        qm.alter_client_quotas([(entity, {key or self.key: value})])

    def rec(self, qm, user, client_id, value, t):
        return qm.record_and_get_throttle_time_ms(self.qt, user, client_id, value, now_ms=t)

    def rate(self, qm, user, client_id, t):
        return qm.measured_rate(self.qt, user, client_id, now_ms=t)

    def tags(self, qm, user, client_id):
        return qm.quota_metric_tags(self.qt, user, client_id)

    def limit(self, qm, user, client_id):
        return qm.quota_limit(self.qt, user, client_id)


@pytest.fixture
def env(impl, qt_name):
    e = Env(impl, qt_name)
    yield e
    close_managers(e.made)

