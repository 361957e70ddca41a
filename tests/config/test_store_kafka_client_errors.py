"""client_errors.py: which of librdkafka's error_cb reports become the store's one-line refusal
(the whole path against Apache Kafka's broker is test_store_kafka_broker.py's wrong password)."""

from __future__ import annotations

import pytest

from kquota.stores.base import ConfigStoreError
from kquota.stores.kafka.client_errors import ClientErrors


class FakeError:
    def __init__(self, name: str, text: str) -> None:
        self._name, self._text = name, text

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return self._text


def test_a_transport_failure_is_no_refusal():
    errors = ClientErrors("a.properties")
    errors.error_cb(FakeError("_TRANSPORT", "Broker transport failure"))
    errors.error_cb(FakeError("_ALL_BROKERS_DOWN", "1/1 brokers are down"))
    assert errors.refusal() is None
    errors.check("kafka://h:1/t")  # nothing raised


def test_a_refused_password_is_one_line_naming_the_properties():
    errors = ClientErrors("a.properties")
    errors.error_cb(FakeError("_AUTHENTICATION", "SASL authentication error: Authentication failed\n"
                                                 "  during authentication\r\n(after 5ms)"))
    with pytest.raises(ConfigStoreError) as e:
        errors.check("kafka://h:1/t")
    assert str(e.value) == ("store kafka://h:1/t: the cluster refused the store's credentials (a.properties): "
                            "AUTHENTICATION: SASL authentication error: Authentication failed during authentication "
                            "(after 5ms)")


def test_an_error_without_a_name_is_ignored():
    errors = ClientErrors("a.properties")
    errors.error_cb(object())
    assert errors.refusal() is None
