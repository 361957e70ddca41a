"""The produce/fetch response throttle when byte-rate and request quotas both apply (KafkaApis)."""

import doctest

import pytest

import kquota
import kquota.response
from kquota import ClientQuotaType as Q
from kquota import response_throttle


@pytest.mark.parametrize(
    "byte_type, byte_ms, request_ms, expected",
    [
        (Q.PRODUCE, 0, 0, (0, None)),
        (Q.PRODUCE, 300, 120, (300, Q.PRODUCE)),
        (Q.PRODUCE, 120, 300, (300, Q.REQUEST)),
        # KafkaApis enforces the byte quota only when its throttle is strictly larger.
        (Q.FETCH, 50, 50, (50, Q.REQUEST)),
        (Q.FETCH, 1, 0, (1, Q.FETCH)),
        (Q.FETCH, 0, 1, (1, Q.REQUEST)),
        # KIP-599's APIs: the same rule with the controller-mutation throttle
        # (RequestHandlerHelper.sendResponseMaybeThrottleWithControllerQuota).
        (Q.CONTROLLER_MUTATION, 20, 10, (20, Q.CONTROLLER_MUTATION)),
        (Q.CONTROLLER_MUTATION, 10, 10, (10, Q.REQUEST)),
    ],
)
def test_larger_throttle_wins_ties_go_to_the_request_quota(byte_type, byte_ms, request_ms, expected):
    r = response_throttle(byte_type, byte_ms, request_ms)
    assert (r.throttle_time_ms, r.enforce) == expected
    assert isinstance(r, kquota.ResponseThrottle)


def test_end_to_end_with_both_quotas():
    qm = kquota.QuotaManager()
    qm.alter_client_quotas([({"user": "u"}, {"producer_byte_rate": 1000, "request_percentage": 1})])
    h = qm.client("u", "c")
    byte_ms = h.record_and_get_throttle_time_ms(Q.PRODUCE, 20_000, now_ms=0)
    request_ms = h.record_request_time(5_000_000_000, now_ms=0)
    assert byte_ms == 10_000 and request_ms == 1000  # the request throttle is capped at one window
    assert response_throttle(Q.PRODUCE, byte_ms, request_ms) == (10_000, Q.PRODUCE)


@pytest.mark.parametrize(
    "args, exc",
    [
        ((Q.REQUEST, 1, 1), ValueError),
        ((Q.PRODUCE, -1, 0), ValueError),
        ((Q.PRODUCE, 1.5, 0), TypeError),
        ((Q.PRODUCE, 0, True), TypeError),
    ],
)
def test_bad_arguments(args, exc):
    with pytest.raises(exc):
        response_throttle(*args)


def test_module_doctests():
    assert doctest.testmod(kquota.response).failed == 0
