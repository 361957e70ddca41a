"""Apache Kafka's tests of quota configuration (SanitizerTest, ClientQuotasRequestTest,
ClientQuotaControlManagerTest) ported to kquota. Source, method and what is not ported:
test_kafka_ported.py."""

import re
import urllib.parse

import pytest

from kquota import ClientQuotaEntity, QuotaConfigError
from kafka_port import (FETCH, PRODUCE, set_quota)

# clients/src/test/java/org/apache/kafka/common/utils/SanitizerTest.java
# (Sanitizer.sanitize is what ClientQuotaManager applies to the principal for the user tag.)
# ============================================================================================


def _user_tag(qm, user):
    return qm.quota_metric_tags(PRODUCE, user, "c")["user"]


def test_kafka_sanitize(qm):
    """Kafka SanitizerTest.testSanitize: the sanitized principal uses only [a-zA-Z0-9._-] apart
    from %-escapes, and URL-decodes back to the principal."""
    set_quota(qm, PRODUCE, {"user": None}, 1000)
    principal = "CN=Some characters !@#$%&*()_-+=';:,/~"
    sanitized = _user_tag(qm, principal)
    assert re.fullmatch(r"[a-zA-Z0-9._\-]+", sanitized.replace("%", "_"))
    assert urllib.parse.unquote_plus(sanitized) == principal  # Java's URLDecoder.decode
    # exact form (URLEncoder, then * -> %2A and + -> %20)
    assert sanitized == ("CN%3DSome%20characters%20%21%40%23%24%25%26%2A%28%29_-%2B%3D%27%3B"
                         "%3A%2C%2F%7E")


def test_kafka_jmx_sanitize(qm):
    """Kafka SanitizerTest.testJmxSanitize, the part about Sanitizer.sanitize: for every char c
    (0..65535, lone surrogates included) the sanitized "value" + c is JMX-safe, i.e. matches
    jmxSanitize's MBEAN_PATTERN [\\w-%\\. \\t]* (Java's \\w is ASCII) so it is never quoted."""
    set_quota(qm, PRODUCE, {"user": None}, 1000)
    mbean = re.compile(r"[A-Za-z0-9_\-%. \t]*")
    bad = []
    for i in range(65536):
        value = "value" + chr(i)
        tag = _user_tag(qm, value)
        if not mbean.fullmatch(tag):
            bad.append((i, tag))
    assert bad == []
    # the encoder Java uses turns a lone surrogate into '?' (%3F)
    assert _user_tag(qm, "value\ud800") == "value%3F"


# ============================================================================================
# core/src/test/scala/unit/kafka/server/ClientQuotasRequestTest.scala
# (AlterClientQuotas / DescribeClientQuotas against a broker -> alter_client_quotas /
# describe_client_quotas on one manager; Kafka's describe filters by the entity, here it is read
# from the full description.)
# ============================================================================================

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"


def alter_entity_quotas(qm, entity, alter, validate_only):
    qm.alter_client_quotas([(entity, alter)], validate_only=validate_only)


def verify_describe_entity_quotas(qm, entity, quotas):
    described = qm.describe_client_quotas()
    if not quotas:
        assert ClientQuotaEntity(entity) not in described
    else:
        assert described[ClientQuotaEntity(entity)] == quotas


def test_kafka_alter_client_quotas_request(qm):
    """Kafka ClientQuotasRequestTest.testAlterClientQuotasRequest."""
    entity = {"user": "user", "client-id": "client-id"}
    verify_describe_entity_quotas(qm, entity, {})  # expect an empty configuration

    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 10000.0, CONSUMER_BYTE_RATE: 20000.0},
                        validate_only=False)  # add two configuration entries
    verify_describe_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 10000.0,
                                               CONSUMER_BYTE_RATE: 20000.0})

    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 15000.0}, validate_only=False)  # update
    verify_describe_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 15000.0,
                                               CONSUMER_BYTE_RATE: 20000.0})

    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: None}, validate_only=False)  # remove
    verify_describe_entity_quotas(qm, entity, {CONSUMER_BYTE_RATE: 20000.0})

    # remove a non-existent configuration entry: no change
    alter_entity_quotas(qm, entity, {REQUEST_PERCENTAGE: None}, validate_only=False)
    verify_describe_entity_quotas(qm, entity, {CONSUMER_BYTE_RATE: 20000.0})

    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 5000.0}, validate_only=False)  # add back
    verify_describe_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 5000.0,
                                               CONSUMER_BYTE_RATE: 20000.0})

    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0, CONSUMER_BYTE_RATE: None,
                                     REQUEST_PERCENTAGE: 12.3}, validate_only=False)  # mixed
    verify_describe_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0,
                                               REQUEST_PERCENTAGE: 12.3})


def test_kafka_alter_client_quotas_request_validate_only(qm):
    """Kafka ClientQuotasRequestTest.testAlterClientQuotasRequestValidateOnly."""
    entity = {"user": "user"}
    expected = {PRODUCER_BYTE_RATE: 20000.0, REQUEST_PERCENTAGE: 23.45}
    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0, REQUEST_PERCENTAGE: 23.45},
                        validate_only=False)
    verify_describe_entity_quotas(qm, entity, expected)
    for alter in [
        {CONSUMER_BYTE_RATE: 50000.0},  # validate-only addition
        {PRODUCER_BYTE_RATE: 10000.0},  # validate-only modification
        {REQUEST_PERCENTAGE: None},  # validate-only removal
        {PRODUCER_BYTE_RATE: 10000.0, CONSUMER_BYTE_RATE: 50000.0,
         REQUEST_PERCENTAGE: None},  # validate-only mixed update
    ]:
        alter_entity_quotas(qm, entity, alter, validate_only=True)
        verify_describe_entity_quotas(qm, entity, expected)
    # and the limits in force are unchanged
    assert qm.quota_limit(PRODUCE, "user", "any") == 20000.0
    assert qm.quota_limit(FETCH, "user", "any") is None


@pytest.mark.parametrize("entity,alter", [
    ({"user": ""}, {REQUEST_PERCENTAGE: 12.34}),
    ({"client-id": ""}, {REQUEST_PERCENTAGE: 12.34}),
    ({"": "name"}, {REQUEST_PERCENTAGE: 12.34}),
    ({}, {PRODUCER_BYTE_RATE: 10000.5}),
    ({"user": "user"}, {"bad": 1.0}),
    ({"user": "user"}, {PRODUCER_BYTE_RATE: 10000.5}),
], ids=["empty-user", "empty-client-id", "empty-entity-type", "empty-entity", "bad-key",
        "fractional-byte-rate"])
def test_kafka_alter_client_quotas_invalid_requests(qm, entity, alter):
    """Kafka ClientQuotasRequestTest.testAlterClientQuotasInvalidRequests (validateOnly = true;
    Kafka's InvalidRequestException is QuotaConfigError)."""
    with pytest.raises(QuotaConfigError):
        alter_entity_quotas(qm, entity, alter, validate_only=True)
    assert qm.describe_client_quotas() == {}


def test_kafka_client_quotas_sanitized(qm):
    """Kafka ClientQuotasRequestTest.testClientQuotasSanitized: a user name that must be
    sanitized is described back by its raw name."""
    entity = {"user": "user with spaces"}
    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0}, validate_only=False)
    verify_describe_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0})
    # the broker applies it to that principal, whose metric tag is the sanitized name
    assert qm.quota_limit(PRODUCE, "user with spaces", "c") == 20000.0
    assert qm.quota_metric_tags(PRODUCE, "user with spaces", "c") == {
        "user": "user%20with%20spaces", "client-id": ""}


def test_kafka_client_quotas_with_default_name(qm):
    """Kafka ClientQuotasRequestTest.testClientQuotasWithDefaultName: a client-id literally
    named "<default>" is not the default entity."""
    entity = {"client-id": "<default>"}
    alter_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0}, validate_only=False)
    verify_describe_entity_quotas(qm, entity, {PRODUCER_BYTE_RATE: 20000.0})
    # "This should not match": no quota for the default client-id entity
    assert ClientQuotaEntity({"client-id": None}) not in qm.describe_client_quotas()
    assert qm.quota_limit(PRODUCE, "u", "<default>") == 20000.0
    assert qm.quota_limit(PRODUCE, "u", "other") is None


# ============================================================================================
# metadata/src/test/java/org/apache/kafka/controller/ClientQuotaControlManagerTest.java
# (Kafka's "INVALID_REQUEST and no records" is QuotaConfigError with nothing applied.)
# ============================================================================================


def assert_invalid_quota(qm, entity, quotas):
    before = qm.describe_client_quotas()
    with pytest.raises(QuotaConfigError):
        qm.alter_client_quotas([(entity, quotas)])
    assert qm.describe_client_quotas() == before


@pytest.mark.parametrize("entity", [
    {"foo": "bar"},  # unknown type "foo"
    {None: "null"},  # null type
    {"user": "user-1", "foo": "bar"},  # valid + unknown combo
    {"foo": "bar", "ip": "1.2.3.4"},
    {"user": "user-1", "ip": "1.2.3.4"},  # invalid combinations
    {"client-id": "user-1", "ip": "1.2.3.4"},
    {},  # empty
], ids=["unknown", "null-type", "user+unknown", "unknown+ip", "user+ip", "client+ip", "empty"])
def test_kafka_invalid_entity_types(qm, entity):
    """Kafka ClientQuotaControlManagerTest.testInvalidEntityTypes (producer_byte_rate 10000)."""
    assert_invalid_quota(qm, entity, {PRODUCER_BYTE_RATE: 10000.0})


@pytest.mark.parametrize("quotas", [
    {"not.a.quota.key": 0.0, REQUEST_PERCENTAGE: 99.9},  # invalid + valid keys
    {REQUEST_PERCENTAGE: 99.9, "not.a.quota.key": 0.0},  # valid + invalid keys
    {None: 99.9},  # null key
], ids=["invalid-then-valid", "valid-then-invalid", "null-key"])
def test_kafka_invalid_quota_keys(qm, quotas):
    """Kafka ClientQuotaControlManagerTest.testInvalidQuotaKeys."""
    assert_invalid_quota(qm, {"user": "user-1"}, quotas)


def test_kafka_alter_and_remove(qm):
    """Kafka ClientQuotaControlManagerTest.testAlterAndRemove."""
    user_entity = ClientQuotaEntity({"user": "user-1"})

    def data():
        return qm.describe_client_quotas().get(user_entity)

    qm.alter_client_quotas([(user_entity, {PRODUCER_BYTE_RATE: 10000.0})])  # add one quota
    assert data() == {PRODUCER_BYTE_RATE: 10000.0}
    # replace it and add another
    qm.alter_client_quotas([(user_entity, {PRODUCER_BYTE_RATE: 10001.0,
                                           CONSUMER_BYTE_RATE: 20000.0})])
    assert data() == {PRODUCER_BYTE_RATE: 10001.0, CONSUMER_BYTE_RATE: 20000.0}
    # remove one of the quotas, the other remains
    qm.alter_client_quotas([(user_entity, {PRODUCER_BYTE_RATE: None})])
    assert data() == {CONSUMER_BYTE_RATE: 20000.0}
    # remove non-existent quota, no change
    qm.alter_client_quotas([(user_entity, {REQUEST_PERCENTAGE: None})])
    assert data() == {CONSUMER_BYTE_RATE: 20000.0}
    # all quotas removed: the entity is gone
    qm.alter_client_quotas([(user_entity, {CONSUMER_BYTE_RATE: None})])
    assert user_entity not in qm.describe_client_quotas()
    # remove non-existent quota, again no change
    qm.alter_client_quotas([(user_entity, {CONSUMER_BYTE_RATE: None})])
    assert user_entity not in qm.describe_client_quotas()
    # mixed update
    qm.alter_client_quotas([(user_entity, {REQUEST_PERCENTAGE: 99.0,
                                           CONTROLLER_MUTATION_RATE: None,
                                           PRODUCER_BYTE_RATE: 10002.0,
                                           CONSUMER_BYTE_RATE: 20001.0})])
    assert data() == {CONSUMER_BYTE_RATE: 20001.0, PRODUCER_BYTE_RATE: 10002.0,
                      REQUEST_PERCENTAGE: 99.0}


def test_kafka_entity_types(qm):
    """Kafka ClientQuotaControlManagerTest.testEntityTypes: every user / client-id entity shape
    (named and <default>) is accepted and stored with its value."""
    quotas_to_test = {
        ClientQuotaEntity({"user": "user-1", "client-id": "client-id-1"}): 50.50,
        ClientQuotaEntity({"user": "user-2", "client-id": "client-id-1"}): 51.51,
        ClientQuotaEntity({"user": "user-3", "client-id": "client-id-2"}): 52.52,
        ClientQuotaEntity({"user": None, "client-id": "client-id-1"}): 53.53,
        ClientQuotaEntity({"user": "user-1", "client-id": None}): 54.54,
        ClientQuotaEntity({"user": "user-3", "client-id": None}): 55.55,
        ClientQuotaEntity({"user": "user-1"}): 56.56,
        ClientQuotaEntity({"user": "user-2"}): 57.57,
        ClientQuotaEntity({"user": "user-3"}): 58.58,
        ClientQuotaEntity({"user": None}): 59.59,
        ClientQuotaEntity({"client-id": "client-id-2"}): 60.60,
    }
    qm.alter_client_quotas([(e, {REQUEST_PERCENTAGE: v}) for e, v in quotas_to_test.items()])
    assert qm.describe_client_quotas() == {
        e: {REQUEST_PERCENTAGE: v} for e, v in quotas_to_test.items()}


ALL_CLIENT_KEYS = {PRODUCER_BYTE_RATE: 1000, CONSUMER_BYTE_RATE: 2000,
                   CONTROLLER_MUTATION_RATE: 10.0, REQUEST_PERCENTAGE: 50.0}


@pytest.mark.parametrize("entity", [
    {"user": "foo"}, {"client-id": "foo"}, {"client-id": "foo", "user": "foo"},
], ids=["testConfigKeysForEntityTypeWithUser", "testConfigKeysForEntityTypeWithClientId",
        "testConfigKeysForEntityTypeWithUserAndClientId"])
def test_kafka_config_keys_for_entity_type(qm, entity):
    """Kafka ClientQuotaControlManagerTest.testConfigKeysForEntityTypeWith{User,ClientId,
    UserAndClientId}: exactly producer_byte_rate, consumer_byte_rate, controller_mutation_rate
    and request_percentage are valid for these entities."""
    for key, value in ALL_CLIENT_KEYS.items():
        qm.alter_client_quotas([(entity, {key: value})], validate_only=True)
    qm.alter_client_quotas([(entity, ALL_CLIENT_KEYS)])
    assert qm.describe_client_quotas() == {
        ClientQuotaEntity(entity): {k: float(v) for k, v in ALL_CLIENT_KEYS.items()}}
    assert_invalid_quota(qm, entity, {"connection_creation_rate": 10.0})  # the IP-entity key


def test_kafka_config_keys_for_empty_entity(qm):
    """Kafka ClientQuotaControlManagerTest.testConfigKeysForEmptyEntity: "Invalid empty client
    quota entity"."""
    for key, value in ALL_CLIENT_KEYS.items():
        assert_invalid_quota(qm, {}, {key: value})


@pytest.mark.parametrize("key,value,valid", [
    pytest.param("foobar", 1.0, False, id="testValidateQuotaKeyValueForUnknownQuota"),
    pytest.param(PRODUCER_BYTE_RATE, 0.0, False, id="testValidateQuotaKeyValueForZeroQuota"),
    pytest.param(CONSUMER_BYTE_RATE, -2.0, False, id="testValidateQuotaKeyValueForNegativeQuota"),
    pytest.param(CONSUMER_BYTE_RATE, 1234.0, True,
                 id="testValidateQuotaKeyValueForValidConsumerByteRate"),
    pytest.param(CONSUMER_BYTE_RATE, 36893488147419103232.4, False,
                 id="testValidateQuotaKeyValueForConsumerByteRateTooLarge"),
    pytest.param(CONSUMER_BYTE_RATE, 2.245, False,
                 id="testValidateQuotaKeyValueForFractionalConsumerByteRate"),
    # Kafka accepts 1235.0000001: getErrorForIntegralQuotaValue rejects only
    # |value % 1.0| > 1e-6 (here 1.0000008e-7), and the value is kept as given.
    pytest.param(CONSUMER_BYTE_RATE, 1235.0000001, True,
                 id="testValidateQuotaKeyValueForValidConsumerByteRate2"),
    pytest.param(REQUEST_PERCENTAGE, 56.62367, True,
                 id="testValidateQuotaKeyValueForValidRequestPercentage"),
])
def test_kafka_validate_quota_key_value(qm, key, value, valid):
    """Kafka ClientQuotaControlManagerTest.testValidateQuotaKeyValueFor* (keys valid for a
    client-id entity)."""
    entity = {"client-id": "foo"}
    if valid:
        qm.alter_client_quotas([(entity, {key: value})], validate_only=True)
        qm.alter_client_quotas([(entity, {key: value})])
        assert qm.describe_client_quotas() == {ClientQuotaEntity(entity): {key: value}}
    else:
        with pytest.raises(QuotaConfigError) as info:
            qm.alter_client_quotas([(entity, {key: value})], validate_only=True)
        assert key in str(info.value)  # Kafka's messages name the key too
        assert_invalid_quota(qm, entity, {key: value})
