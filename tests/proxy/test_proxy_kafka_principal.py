"""The principal comes only from a SASL exchange Apache Kafka's broker completed (``kafka_broker``,
its SASL_PLAINTEXT listener: PLAIN, SCRAM-SHA-256/512, OAUTHBEARER with Kafka's unsecured
validator): the attacks as a client writes them (raw frames) through an in-process proxy on a
SASL listener, and real clients charged to the principal the broker authenticated."""

from __future__ import annotations

import base64
import json
import struct
import time
import uuid

import kquota
import pytest
from kquota.kafka.protocol import apis
from kquota.kafka.protocol.codec import encode_body
from proxy_support import ProxyThread
from proxy_wire import Wire
from sasl_wire import (ILLEGAL_SASL_STATE, alter_victim, authenticate, closed_unauthenticated, describe, handshake,
                       plain, plane_users, refused, scram_login)

PREFIX = "kq-principal-"
PRODUCE = kquota.ClientQuotaType.PRODUCE
REQUEST = kquota.ClientQuotaType.REQUEST


@pytest.fixture(scope="module")
def topic(kafka_broker):
    name = f"{PREFIX}{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(name)
    kafka_broker.allow("User:alice", PREFIX)
    return name


@pytest.fixture
def proxy(kafka_broker):
    host, port = kafka_broker.listeners["SASL_PLAINTEXT"].split(",")[0].rsplit(":", 1)
    qm = kquota.QuotaManager(window_num=2, window_size_seconds=1)
    p = ProxyThread((host, int(port)), qm=qm, sasl_listener=True, admin_principals=["admin"])
    yield p
    p.stop()
    qm.close()


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


def test_reauthentication_as_another_principal_leaves_admin_admin(proxy, kafka_broker):
    """A second SaslHandshake + SaslAuthenticate as alice after admin: Kafka refuses it (a
    handshake outside re-authentication is ILLEGAL_SASL_STATE; within it, another principal is
    SASL_AUTHENTICATION_FAILED and the connection closes); the connection never becomes alice's."""
    w = connect(proxy, "ops")
    assert scram_login(w, "admin", kafka_broker.users["admin"])["ErrorCode"] == 0
    assert plane_users(proxy) == {"admin"}
    try:
        if handshake(w, "PLAIN") == 0:
            assert refused(w, plain("alice", kafka_broker.users["alice"]))
            return
        assert authenticate(w, plain("alice", kafka_broker.users["alice"]))["ErrorCode"] != 0
    except ConnectionError:
        return
    assert plane_users(proxy) == {"admin"}
    assert alter_victim(w) == 0  # still admin


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
