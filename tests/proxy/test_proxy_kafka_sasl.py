"""SASL through ``kquota proxy`` against Apache Kafka's own broker (``kafka_broker``): every
mechanism the broker's SASL_PLAINTEXT listener takes (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512,
OAUTHBEARER with Kafka's unsecured validator) authenticates a real user through the proxy, and
every failure the broker decides (a wrong password, an unknown user, an invalid OAUTHBEARER token,
a topic the user has no ACL for) reaches the client through the proxy exactly as it does directly.
The broker decides; the proxy relays: a client that cannot authenticate directly cannot through
the proxy either."""

from __future__ import annotations

import re

import pytest
from kafka_proxy import KquotaProxy, produce_one

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
PREFIX = "kq-sasl-"


@pytest.fixture(scope="module")
def topic(kafka_broker):
    """alice's topic: she may write it (an ACL); bob may not (none)."""
    return kafka_broker.topic_for("User:alice", PREFIX)


@pytest.fixture(scope="module")
def sasl_proxy(kafka_broker, tmp_path_factory):
    proxy = KquotaProxy(f"SASL_PLAINTEXT://{kafka_broker.listeners['SASL_PLAINTEXT']}",
                        tmp_path_factory.mktemp("sasl-proxy"), listen="SASL_PLAINTEXT")
    yield proxy
    code, err = proxy.stop()
    assert code == 0, err


def through(conf: dict, proxy: KquotaProxy) -> dict:
    return {**conf, "bootstrap.servers": proxy.address}


def first_failure(errors: list) -> int:
    """The code of the first authentication or transport error the client saw."""
    from confluent_kafka import KafkaError

    codes = [e.code() for e in errors if e.code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT)]
    assert codes, f"no authentication or transport error, got {errors}"
    return codes[0]


def bad_conf(kafka_broker, mechanism: str) -> dict:
    """alice with a wrong password, or (OAUTHBEARER) a token that is no JWS at all."""
    import time

    conf = kafka_broker.client_config("SASL_PLAINTEXT", "alice", mechanism)
    if mechanism == "OAUTHBEARER":
        del conf["sasl.oauthbearer.config"], conf["enable.sasl.oauthbearer.unsecure.jwt"]
        conf["oauth_cb"] = lambda _config: ("not-a-jws-token", time.time() + 3600, "alice")
    else:
        conf["sasl.password"] = "not-alices-password"
    return conf


def broker_reason(errors: list) -> tuple[int, str]:
    """The authentication error's code and the broker's own message in librdkafka's text
    (without the address and timing librdkafka adds around it)."""
    from confluent_kafka import KafkaError

    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, f"no authentication error, got {errors}"
    text = auth[0].str()
    match = re.search(r"SASL authentication error: (.*?)(?: \(after \d+ms.*)?$", text)
    return auth[0].code(), match.group(1) if match else text


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_each_mechanism_authenticates_through_the_proxy(kafka_broker, sasl_proxy, topic, mechanism):
    conf = kafka_broker.client_config("SASL_PLAINTEXT", "alice", mechanism)
    assert produce_one(conf, topic)[0], "alice cannot produce directly"
    delivered, errors = produce_one(through(conf, sasl_proxy), topic)
    assert delivered, errors


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user, password", [("alice", "not-alices-password"), ("admin", "alice-secret"),
                                            ("mallory", "mallory-secret")])
def test_a_bad_password_fails_through_the_proxy_as_it_fails_directly(kafka_broker, sasl_proxy, topic,
                                                                     mechanism, user, password):
    # alice with a wrong password, admin with alice's, a user the broker does not know
    conf = kafka_broker.client_config("SASL_PLAINTEXT", "alice", mechanism)
    conf.update({"sasl.username": user, "sasl.password": password})
    direct_delivered, direct_errors = produce_one(conf, topic, timeout=15)
    proxied_delivered, proxied_errors = produce_one(through(conf, sasl_proxy), topic, timeout=15)
    assert not direct_delivered and not proxied_delivered
    from confluent_kafka import KafkaError

    assert first_failure(direct_errors) == KafkaError._AUTHENTICATION  # the broker answers, then closes
    direct = broker_reason(direct_errors)
    assert "Authentication failed" in direct[1], direct
    assert broker_reason(proxied_errors) == direct


def test_an_invalid_oauthbearer_token_fails_through_the_proxy_as_it_fails_directly(kafka_broker, sasl_proxy,
                                                                                   topic):
    # Kafka answers an invalid token with an ErrorCode-0 challenge carrying its error JSON, and
    # fails the client's next round: the failure must reach the client through the proxy too.
    conf = bad_conf(kafka_broker, "OAUTHBEARER")
    direct_delivered, direct_errors = produce_one(conf, topic, timeout=15)
    proxied_delivered, proxied_errors = produce_one(through(conf, sasl_proxy), topic, timeout=15)
    assert not direct_delivered and not proxied_delivered
    direct = broker_reason(direct_errors)
    assert broker_reason(proxied_errors) == direct


def test_an_unsigned_token_naming_admin_is_admin_only_as_the_broker_says(kafka_broker, sasl_proxy, topic):
    # The broker's unsecured validator (configured for tests) accepts an unsigned token: the
    # principal is the broker's decision, and through the proxy the same token does the same.
    conf = kafka_broker.client_config("SASL_PLAINTEXT", "admin", "OAUTHBEARER")
    assert produce_one(conf, topic)[0]
    assert produce_one(through(conf, sasl_proxy), topic)[0]


def test_a_user_without_an_acl_is_refused_through_the_proxy_as_directly(kafka_broker, sasl_proxy, topic):
    from confluent_kafka import KafkaError

    for mechanism in ("PLAIN", "SCRAM-SHA-512"):
        conf = kafka_broker.client_config("SASL_PLAINTEXT", "bob", mechanism)
        for c in (conf, through(conf, sasl_proxy)):
            delivered, errors = produce_one(c, topic, timeout=15)
            assert not delivered
            assert KafkaError.TOPIC_AUTHORIZATION_FAILED in {e.code() for e in errors}, errors


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_every_failed_authentication_reaches_the_client_as_the_brokers_answer(kafka_broker, sasl_proxy,
                                                                             topic, mechanism):
    from confluent_kafka import KafkaError

    # Directly, the broker's answer always arrives before its close; through the proxy it must too,
    # on every connection (eight tries: the close races the answer, which was lost in 7 of 10
    # connections, so the mark cannot pass by luck).
    for _ in range(8):
        delivered, errors = produce_one(through(bad_conf(kafka_broker, mechanism), sasl_proxy), topic, timeout=15)
        assert not delivered
        assert first_failure(errors) == KafkaError._AUTHENTICATION, errors
