"""Fixtures shared by the request-time and controller-mutation rule tests: one window for every
stat (see ``one_window``)."""

import pytest

from conftest import closing_factory


def one_window(kwargs):
    """These rule tests measure every stat over the quota window, so their numbers read
    directly: Kafka's separate windows (the quota-less rates over the broker's metrics window of
    2 x 30 s, the bucket's burst over controller.quota.window.*) default to the quota window here
    unless a test sets them. The test named ..._as_kafka_does checks Kafka's defaults."""
    wn, ws = kwargs.get("window_num", 11), kwargs.get("window_size_seconds", 1)
    kwargs.setdefault("metrics_num_samples", wn)
    kwargs.setdefault("metrics_sample_window_ms", ws * 1000)
    kwargs.setdefault("controller_window_num", wn)
    kwargs.setdefault("controller_window_size_seconds", ws)
    return kwargs


@pytest.fixture
def one_window_qm(kq):
    """A kquota.QuotaManager with default settings except one window for every stat (the
    conftest's ``qm`` has Kafka's separate windows)."""
    m = kq.QuotaManager(**one_window({}))
    yield m
    m.close()


@pytest.fixture
def mk(impl):
    """Factory of managers of the implementation under test (closed at teardown)."""
    yield from closing_factory(lambda **kwargs: impl.make(**one_window(kwargs)))
