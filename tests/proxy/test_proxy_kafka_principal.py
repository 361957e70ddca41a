"""The principal comes only from a SASL exchange Apache Kafka's broker completed (``kafka_broker``,
its SASL_PLAINTEXT listener: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with Kafka's unsecured
validator, delegation tokens, KIP-368 re-authentication): the attacks as a client writes them
(raw frames) through an in-process proxy on a SASL listener, and real clients charged to the
principal the broker authenticated."""

from __future__ import annotations

import base64
import json
import struct
import time

import kquota
import pytest
from kquota.kafka.client_security import client_security
from kquota.kafka.protocol import apis
from kquota.kafka.protocol.codec import encode_body
from kquota.proxy.token_owners import TokenOwners
from proxy_support import ProxyThread
from proxy_wire import Wire
from sasl_wire import (ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED, alter_victim, authenticate,
                       closed_unauthenticated, create_delegation_token, describe, handshake, plain, plane_users, refused,
                       scram_login, token_login)
from waiting import wait_until

PREFIX = "kq-principal-"
PRODUCE = kquota.ClientQuotaType.PRODUCE
REQUEST = kquota.ClientQuotaType.REQUEST
#: The broker's connections.max.reauth.ms (scripts/kafka.sh): the session lifetime of a login.
REAUTH_MS = 3_600_000


@pytest.fixture(scope="module")
def topic(kafka_broker):
    return kafka_broker.topic_for("User:alice", PREFIX)


def broker_address(kafka_broker) -> tuple[str, int]:
    """The broker's SASL_PLAINTEXT listener."""
    host, port = kafka_broker.listeners["SASL_PLAINTEXT"].split(",")[0].rsplit(":", 1)
    return host, int(port)


def start(kafka_broker, **options) -> ProxyThread:
    qm = kquota.QuotaManager(window_num=2, window_size_seconds=1)
    return ProxyThread(broker_address(kafka_broker), qm=qm, sasl_listener=True, **options)


def stop(proxy: ProxyThread) -> None:
    proxy.stop()
    proxy.qm.close()


@pytest.fixture
def proxy(kafka_broker):
    p = start(kafka_broker, admin_principals=["admin"])
    yield p
    stop(p)


def connect(proxy: ProxyThread, client_id: str = "attacker") -> Wire:
    return Wire(proxy.proxy.bootstrap_address, client_id)


def test_scram_client_first_naming_admin_is_not_admin(proxy):
    """Kafka answers ``n,,n=admin,r=x`` with its server-first challenge, ErrorCode 0."""
    w = connect(proxy)
    assert handshake(w, "SCRAM-SHA-512") == 0
    first = authenticate(w, b"n,,n=admin,r=x")
    assert first["ErrorCode"] == 0 and bytes(first["AuthBytes"]).startswith(b"r=x")
    assert "admin" not in plane_users(proxy)
    assert closed_unauthenticated(w, alter_victim)
    w = connect(proxy)
    assert handshake(w, "SCRAM-SHA-512") == 0
    assert authenticate(w, b"n,,n=admin,r=x")["ErrorCode"] == 0
    assert closed_unauthenticated(w, describe)
    assert proxy.qm.describe_client_quotas() == {}


def test_failed_scram_proof_is_not_admin(proxy):
    w = connect(proxy)
    assert handshake(w, "SCRAM-SHA-256") == 0
    authenticate(w, b"n,,n=admin,r=abc")
    assert closed_unauthenticated(w, alter_victim)  # between the two rounds
    w = connect(proxy)
    assert handshake(w, "SCRAM-SHA-256") == 0
    server_first = bytes(authenticate(w, b"n,,n=admin,r=abc")["AuthBytes"])
    proof = base64.b64encode(b"\x00" * 32).decode()
    nonce = server_first.split(b",")[0]
    assert refused(w, b"c=biws," + nonce + b",p=" + proof.encode())
    assert proxy.qm.describe_client_quotas() == {}


def _unsecured_jwt(claims: dict) -> bytes:
    def b64(obj: dict) -> bytes:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=")

    return b64({"alg": "none"}) + b"." + b64(claims) + b"."


def test_invalid_oauthbearer_token_naming_admin_is_not_admin(proxy):
    """An expired token: Kafka's validator refuses it with an ErrorCode-0 challenge carrying the
    error JSON (``OAuthBearerSaslServer``), then fails the client's ``\\x01``."""
    w = connect(proxy)
    assert handshake(w, "OAUTHBEARER") == 0
    now = time.time()
    token = _unsecured_jwt({"sub": "admin", "iat": now - 7200, "exp": now - 3600})
    challenge = authenticate(w, b"n,,\x01auth=Bearer " + token + b"\x01\x01")
    assert challenge["ErrorCode"] == 0 and b"invalid_token" in bytes(challenge["AuthBytes"]), challenge
    assert "admin" not in plane_users(proxy)
    assert closed_unauthenticated(w, alter_victim)
    w = connect(proxy)
    assert handshake(w, "OAUTHBEARER") == 0
    assert authenticate(w, b"n,,\x01auth=Bearer " + token + b"\x01\x01")["ErrorCode"] == 0
    assert refused(w, b"\x01")
    assert proxy.qm.describe_client_quotas() == {}


def test_valid_alice_pipelining_a_plain_token_naming_admin_stays_alice(proxy, kafka_broker):
    w = connect(proxy, "pipeliner")
    assert handshake(w, "PLAIN") == 0
    tokens = [plain("alice", kafka_broker.users["alice"]), plain("admin", "guess")]
    w.send_raw(b"".join(w.frame(apis.SASL_AUTHENTICATE, 2, bytes(encode_body(
        "SaslAuthenticateRequest", 2, {"AuthBytes": t}))) for t in tokens))
    codes = [struct.unpack_from(">h", w.read_frame(), 5)[0] for _ in tokens]
    assert codes == [0, ILLEGAL_SASL_STATE]  # KafkaApis answers a token after authentication
    assert alter_victim(w) == apis.CLUSTER_AUTHORIZATION_FAILED
    assert plane_users(proxy) == {"alice"}


def test_reauthentication_keeps_the_principal_and_refuses_another(proxy, kafka_broker):
    """KIP-368 on Kafka's broker (``connections.max.reauth.ms`` set: the answer carries the
    session's lifetime): after alice's login, a re-authentication as alice is answered ErrorCode 0
    and she stays alice; one as admin, with admin's valid password, Kafka refuses
    (``ReauthInfo.ensurePrincipalUnchanged``: SASL_AUTHENTICATION_FAILED) and closes the
    connection, which never becomes admin's."""
    proxy.qm.alter_client_quotas([({"user": "alice"}, {"request_percentage": 1000.0}),
                                  ({"user": "admin"}, {"request_percentage": 1000.0})])
    w = connect(proxy, "reauth")
    assert handshake(w, "PLAIN") == 0
    login = authenticate(w, plain("alice", kafka_broker.users["alice"]))
    assert (login["ErrorCode"], login["SessionLifetimeMs"]) == (0, REAUTH_MS)
    assert handshake(w, "PLAIN") == 0
    again = authenticate(w, plain("alice", kafka_broker.users["alice"]))
    assert (again["ErrorCode"], again["SessionLifetimeMs"]) == (0, REAUTH_MS)
    assert plane_users(proxy) == {"alice"}
    assert alter_victim(w) == apis.CLUSTER_AUTHORIZATION_FAILED  # alice's, charged to her
    assert wait_until(lambda: proxy.qm.measured_rate(REQUEST, "alice", "reauth") > 0, 10)
    # Kafka starts at most one re-authentication a second (KafkaChannel: a SaslHandshake sooner
    # is KafkaApis', answered ILLEGAL_SASL_STATE).
    time.sleep(1.2)  # the span under test: past that second
    assert handshake(w, "PLAIN") == 0
    refusal = authenticate(w, plain("admin", kafka_broker.users["admin"]))
    assert (refusal["ErrorCode"], refusal["ErrorMessage"]) == (
        SASL_AUTHENTICATION_FAILED, "Cannot change principals during re-authentication from User.alice: User.admin")
    assert "admin" not in plane_users(proxy)
    assert w.closed_by_peer()
    assert proxy.qm.measured_rate(REQUEST, "admin", "reauth") == 0
    assert proxy.qm.describe_client_quotas() == {
        kquota.ClientQuotaEntity({"user": "alice"}): {"request_percentage": 1000.0},
        kquota.ClientQuotaEntity({"user": "admin"}): {"request_percentage": 1000.0}}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"], ids=["same mechanism", "another mechanism"])
def test_reauthentication_as_another_principal_closes_the_admin_connection(proxy, kafka_broker, mechanism):
    """admin logged in with SCRAM-SHA-512 re-authenticates as alice (her valid password): with the
    same mechanism Kafka answers SASL_AUTHENTICATION_FAILED ("Cannot change principals") and
    closes; with another, it accepts the handshake (the mechanism is enabled), then closes the
    connection without answering the token (``REAUTH_BAD_MECHANISM``). Neither makes the
    connection alice's, nor leaves it open."""
    w = connect(proxy, "ops")
    assert scram_login(w, "admin", kafka_broker.users["admin"])["ErrorCode"] == 0
    assert plane_users(proxy) == {"admin"}
    assert alter_victim(w) == 0
    if mechanism == "PLAIN":
        assert handshake(w, "PLAIN") == 0
        with pytest.raises(ConnectionError):
            authenticate(w, plain("alice", kafka_broker.users["alice"]))
    else:
        final = scram_login(w, "alice", kafka_broker.users["alice"], mechanism)
        assert (final["ErrorCode"], final["ErrorMessage"]) == (
            SASL_AUTHENTICATION_FAILED, "Cannot change principals during re-authentication from User.admin: User.alice")
        assert w.closed_by_peer()
    assert "alice" not in plane_users(proxy)
    assert proxy.qm.describe_client_quotas() == {
        kquota.ClientQuotaEntity({"user": "victim"}): {"producer_byte_rate": 1.0}}


@pytest.fixture(scope="module")
def alice_token(kafka_broker):
    """A delegation token alice created for herself at the broker: (token id, HMAC in base64)."""
    return create_delegation_token(broker_address(kafka_broker), "alice", kafka_broker.users["alice"])


def owners_as(kafka_broker, user: str) -> TokenOwners:
    """Delegation tokens' owners asked of the broker as ``user`` (PLAIN), as the proxy asks with
    its own credentials (``--broker-config``)."""
    security = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config":
                                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                f'username="{user}" password="{kafka_broker.users[user]}";'}, "test")
    host, port = broker_address(kafka_broker)
    return TokenOwners(f"{host}:{port}", security)


def test_delegation_token_is_its_owner(kafka_broker, alice_token):
    """SCRAM-SHA-256 with ``tokenauth=true`` and alice's token (its id the username, its HMAC the
    password): Kafka's principal is the token's owner. The proxy asks the broker with its own
    credentials (``proxy``, a super user: DescribeDelegationToken) and charges the connection to
    alice, with her rights (describe) and no more; a re-authentication with the token keeps her."""
    token_id = alice_token[0]
    owners = owners_as(kafka_broker, "proxy")
    proxy = start(kafka_broker, token_owners=owners, admin_principals=["admin"], describe_principals=["alice"])
    try:
        proxy.qm.alter_client_quotas([({"user": "alice"}, {"request_percentage": 1000.0}),
                                      ({"user": token_id}, {"request_percentage": 1000.0})])
        w = connect(proxy, "token-client")
        final = token_login(w, alice_token)
        assert final["ErrorCode"] == 0 and bytes(final["AuthBytes"]).startswith(b"v=")
        assert plane_users(proxy) == {"alice"}
        assert describe(w)["ErrorCode"] == 0  # alice's right
        assert alter_victim(w) == apis.CLUSTER_AUTHORIZATION_FAILED
        assert token_login(w, alice_token)["ErrorCode"] == 0  # KIP-368, the same token
        assert plane_users(proxy) == {"alice"}
        assert describe(w)["ErrorCode"] == 0
        assert wait_until(lambda: proxy.qm.measured_rate(REQUEST, "alice", "token-client") > 0, 10)
        assert proxy.qm.measured_rate(REQUEST, token_id, "token-client") == 0
        assert owners.owner(token_id) == "alice"
    finally:
        stop(proxy)


@pytest.mark.parametrize("asker", ["none", "bob"])
def test_delegation_token_owner_unknown_is_counted_per_token_and_never_admin(kafka_broker, alice_token, asker):
    """Where the proxy may not describe the token (asked as bob, no super user and without
    DESCRIBE on tokens: the broker describes him none of alice's; or no credentials to ask with)
    the connection is counted under the token id, and a token id is never an admin nor a
    describe principal, even listed as one."""
    token_id = alice_token[0]
    owners = owners_as(kafka_broker, "bob") if asker == "bob" else None
    proxy = start(kafka_broker, token_owners=owners, admin_principals=["admin", token_id],
                  describe_principals=[token_id])
    try:
        proxy.qm.alter_client_quotas([({"user": "alice"}, {"request_percentage": 1000.0}),
                                      ({"user": token_id}, {"request_percentage": 1000.0})])
        w = connect(proxy, "token-client")
        assert token_login(w, alice_token)["ErrorCode"] == 0
        assert plane_users(proxy) == {token_id}
        assert describe(w)["ErrorCode"] == apis.CLUSTER_AUTHORIZATION_FAILED
        assert alter_victim(w) == apis.CLUSTER_AUTHORIZATION_FAILED
        assert wait_until(lambda: proxy.qm.measured_rate(REQUEST, token_id, "token-client") > 0, 10)
        assert proxy.qm.measured_rate(REQUEST, "alice", "token-client") == 0
        if owners is not None:
            assert owners.owner(token_id) is None
            assert owners_as(kafka_broker, "proxy").owner(token_id) == "alice"  # the proxy's own credentials may
    finally:
        stop(proxy)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_real_clients_are_charged_to_the_principal_kafka_authenticated(proxy, kafka_broker, topic, mechanism):
    from confluent_kafka import Producer

    proxy.qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 1e9}),
                                  ({"user": None}, {"producer_byte_rate": 1e9})])
    conf = kafka_broker.client_config("SASL_PLAINTEXT", "alice", mechanism)
    conf.update({"bootstrap.servers": proxy.address, "client.id": f"real-{mechanism}"})
    p = Producer(conf)
    for _ in range(10):
        p.produce(topic, b"v" * 1000)
    assert p.flush(60) == 0
    assert proxy.qm.measured_rate(PRODUCE, "alice", f"real-{mechanism}") > 0
    assert proxy.qm.measured_rate(PRODUCE, "ANONYMOUS", f"real-{mechanism}") == 0
    # alice may not read the quotas (no --describe-principals), the admin may.
    w = connect(proxy, "ops")
    assert handshake(w, "PLAIN") == 0
    assert authenticate(w, plain("alice", kafka_broker.users["alice"]))["ErrorCode"] == 0
    assert describe(w)["ErrorCode"] == apis.CLUSTER_AUTHORIZATION_FAILED
    w = connect(proxy, "ops")
    assert scram_login(w, "admin", kafka_broker.users["admin"])["ErrorCode"] == 0
    assert describe(w)["ErrorCode"] == 0
