"""The principal comes only from a SASL exchange the broker completed, and clients choose no
privileges: each attack as a client sends it (raw frames, kquota's codec) through a proxy on a
SASL listener, in front of a broker that authenticates as Kafka's ``SaslServerAuthenticator``
(``proxy_fakes.SaslFront``: every intermediate SCRAM / OAUTHBEARER round answered ErrorCode 0
with a challenge, only the last round decides), and the real clients' exchanges end to end.
Apache Kafka's broker is attacked the same way in ``test_proxy_kafka_principal``; this module
keeps the front for what that broker cannot be made to do: answer as a broker that is not Kafka
(``lenient``), hold delegation tokens (the session's broker has no token secret), and list the
principals it authenticated (``front.users``)."""

from __future__ import annotations

import struct
import time

import kquota
import pytest
from kafka_sasl import jwt, oauthbearer_token, scram_client_final
from kquota.kafka.protocol import apis
from kquota.kafka.protocol.codec import encode_body
from proxy_fakes import LoopbackServer, SaslFront, read_frame
from proxy_support import ProxyThread, make_topic
from proxy_wire import Wire
from sasl_wire import (ILLEGAL_SASL_STATE, alter_victim, authenticate, closed_unauthenticated, describe, handshake,
                       plain, plane_users, refused, scram_login)
from waiting import wait_until

from kquota.kafka.protocol.frames import parse_request_header

PRODUCE = kquota.ClientQuotaType.PRODUCE
REQUEST = kquota.ClientQuotaType.REQUEST


@pytest.fixture(scope="module")
def front():
    f = SaslFront()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def lenient_front():
    f = SaslFront(lenient=True)
    yield f
    f.stop()


def start(front: SaslFront, **options) -> ProxyThread:
    qm = kquota.QuotaManager(window_num=2, window_size_seconds=1)
    return ProxyThread(("127.0.0.1", front.port), qm=qm, sasl_listener=True, admin_principals=["admin"], **options)


def stop(proxy: ProxyThread) -> None:
    proxy.stop()
    proxy.qm.close()


def test_scram_client_first_alone_is_not_admin(front):
    """``n,,n=admin,r=x`` is answered with the server-first challenge (ErrorCode 0) whoever it
    names: the client is not admin, may not rewrite a quota nor read them, and the native plane
    was never told ``admin``."""
    proxy = start(front)
    try:
        w = Wire(proxy.proxy.bootstrap_address, "attacker")
        assert handshake(w, "SCRAM-SHA-512") == 0
        first = authenticate(w, b"n,,n=admin,r=x")
        assert first["ErrorCode"] == 0 and bytes(first["AuthBytes"]).startswith(b"r=x")  # Kafka's challenge
        assert "admin" not in plane_users(proxy)
        assert closed_unauthenticated(w, alter_victim)
        for call in (describe, lambda w: w.send_raw(w.frame(apis.METADATA, 1, b"\xff\xff\xff\xff")) or w.read_frame()):
            w = Wire(proxy.proxy.bootstrap_address, "attacker")
            assert handshake(w, "SCRAM-SHA-512") == 0
            assert authenticate(w, b"n,,n=admin,r=x")["ErrorCode"] == 0
            assert closed_unauthenticated(w, call)
        assert proxy.qm.describe_client_quotas() == {}
        # Anything else during the exchange: Kafka's authenticator closes the connection, and
        # nothing is charged to the name the client claimed.
        assert w.closed_by_peer()
        assert proxy.qm.measured_rate(REQUEST, "admin", "attacker") == 0
    finally:
        stop(proxy)


@pytest.mark.parametrize("broker", ["kafka", "rfc5802 e="])
def test_failed_scram_proof_is_not_admin(front, lenient_front, broker):
    """A client-final message with a wrong proof: Kafka answers SASL_AUTHENTICATION_FAILED and
    closes; a broker that answers the RFC's server-final ``e=invalid-proof`` with ErrorCode 0
    authenticates no one either, and the connection stays ANONYMOUS."""
    proxy = start(lenient_front if broker != "kafka" else front)
    try:
        w = Wire(proxy.proxy.bootstrap_address, "attacker")
        assert handshake(w, "SCRAM-SHA-256") == 0
        first_bare = b"n=admin,r=abc"
        authenticate(w, b"n,," + first_bare)
        assert closed_unauthenticated(w, alter_victim)  # between the two rounds
        w = Wire(proxy.proxy.bootstrap_address, "attacker")
        assert handshake(w, "SCRAM-SHA-256") == 0
        server_first = authenticate(w, b"n,," + first_bare)
        final_token = scram_client_final("guess", first_bare, bytes(server_first["AuthBytes"]), "sha256")
        if broker == "kafka":
            assert refused(w, final_token)
        else:
            final = authenticate(w, final_token)
            assert (final["ErrorCode"], bytes(final["AuthBytes"])) == (0, b"e=invalid-proof")
            assert plane_users(proxy) <= {None, "ANONYMOUS"}
            assert closed_unauthenticated(w, alter_victim)
        assert proxy.qm.describe_client_quotas() == {}
    finally:
        stop(proxy)


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "bad signature"])
def test_invalid_oauthbearer_token_naming_admin_is_not_admin(front, signed):
    """Kafka answers an invalid token with an ErrorCode-0 challenge carrying the error JSON; the
    client's ``\\x01`` round after it is the failure. ``sub=admin`` gains nothing."""
    proxy = start(front)
    try:
        w = Wire(proxy.proxy.bootstrap_address, "attacker")
        assert handshake(w, "OAUTHBEARER") == 0
        token = jwt({"sub": "admin"}, b"not-the-broker-key" if signed else None)
        challenge = authenticate(w, oauthbearer_token(token))
        assert challenge["ErrorCode"] == 0 and b"invalid_token" in bytes(challenge["AuthBytes"])
        assert "admin" not in plane_users(proxy)
        assert closed_unauthenticated(w, alter_victim)
        w = Wire(proxy.proxy.bootstrap_address, "attacker")
        assert handshake(w, "OAUTHBEARER") == 0
        assert authenticate(w, oauthbearer_token(token))["ErrorCode"] == 0
        assert refused(w, b"\x01")
        assert proxy.qm.describe_client_quotas() == {}
    finally:
        stop(proxy)


def test_valid_alice_pipelining_a_second_plain_naming_admin_stays_alice(front):
    """alice's valid PLAIN token and, in the same write, a second one naming admin: the first
    completes the exchange (alice), the second belongs to no exchange (Kafka's KafkaApis answers
    it ILLEGAL_SASL_STATE): the connection is alice's, never admin's."""
    proxy = start(front)
    try:
        proxy.qm.alter_client_quotas([({"user": "alice"}, {"request_percentage": 1000.0})])
        w = Wire(proxy.proxy.bootstrap_address, "pipeliner")
        assert handshake(w, "PLAIN") == 0
        tokens = [plain("alice", SaslFront.USERS["alice"]), plain("admin", "guess")]
        w.send_raw(b"".join(w.frame(apis.SASL_AUTHENTICATE, 2, bytes(encode_body(
            "SaslAuthenticateRequest", 2, {"AuthBytes": t}))) for t in tokens))
        answers = [w.read_frame() for _ in tokens]
        assert [struct.unpack_from(">h", a, 5)[0] for a in answers] == [0, ILLEGAL_SASL_STATE]
        assert alter_victim(w) == apis.CLUSTER_AUTHORIZATION_FAILED
        assert describe(w)["ErrorCode"] == apis.CLUSTER_AUTHORIZATION_FAILED
        assert plane_users(proxy) == {"alice"}
        # Her requests are charged to her (the AlterClientQuotas just sent).
        assert proxy.qm.measured_rate(REQUEST, "alice", "pipeliner") > 0
        assert proxy.qm.measured_rate(REQUEST, "admin", "pipeliner") == 0
        assert proxy.qm.describe_client_quotas() == {kquota.ClientQuotaEntity({"user": "alice"}):
                                                     {"request_percentage": 1000.0}}
    finally:
        stop(proxy)


def test_reauthentication_as_another_principal_accepted_by_the_broker_closes_the_connection(lenient_front):
    """KIP-368: a re-authentication may only confirm the principal. Kafka refuses bob after alice
    and closes the connection itself (test_proxy_kafka_principal); a broker that accepts it is
    what Kafka cannot be, hence the lenient front: the proxy closes the connection instead of
    answering, and never takes bob."""
    proxy = start(lenient_front)
    try:
        w = Wire(proxy.proxy.bootstrap_address, "reauth")
        assert handshake(w, "PLAIN") == 0
        assert authenticate(w, plain("alice", SaslFront.USERS["alice"]))["ErrorCode"] == 0
        assert handshake(w, "PLAIN") == 0
        assert refused(w, plain("bob", SaslFront.USERS["bob"]))
        assert wait_until(lambda: lenient_front.users[-2:] == ["alice", "bob"], 10)  # the broker accepted bob
        assert "bob" not in plane_users(proxy)
    finally:
        stop(proxy)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_completed_scram_exchange_is_the_principal(front, mechanism):
    """The final round answered with the server-final ``v=``: the name of that exchange's
    client-first message, for admin rights and the native plane alike."""
    proxy = start(front)
    try:
        w = Wire(proxy.proxy.bootstrap_address, "ops")
        final = scram_login(w, "admin", SaslFront.USERS["admin"], mechanism)
        assert final["ErrorCode"] == 0 and bytes(final["AuthBytes"]).startswith(b"v=")
        assert alter_victim(w) == 0
        assert describe(w)["Entries"][0]["Entity"] == [{"EntityType": "user", "EntityName": "victim"}]
        assert plane_users(proxy) == {"admin"}
    finally:
        stop(proxy)


def test_describe_client_quotas_only_for_admin_and_describe_principals(front):
    """Kafka answers DescribeClientQuotas CLUSTER_AUTHORIZATION_FAILED (no entries, null message)
    without DESCRIBE_CONFIGS on the cluster: the proxy to all but ``--admin-principals`` and
    ``--describe-principals``; a describe principal may still not alter."""
    proxy = start(front, describe_principals=["alice"])
    try:
        proxy.qm.alter_client_quotas([({"user": "bob"}, {"producer_byte_rate": 5.0})])
        assert closed_unauthenticated(Wire(proxy.proxy.bootstrap_address), describe)
        for user, allowed in (("bob", False), ("alice", True)):
            w = Wire(proxy.proxy.bootstrap_address)
            assert handshake(w, "PLAIN") == 0
            assert authenticate(w, plain(user, SaslFront.USERS[user]))["ErrorCode"] == 0
            resp = describe(w)
            if allowed:
                assert resp["ErrorCode"] == 0 and len(resp["Entries"]) == 1
            else:
                assert (resp["ErrorCode"], resp["Entries"]) == (apis.CLUSTER_AUTHORIZATION_FAILED, None)
            assert alter_victim(w) == apis.CLUSTER_AUTHORIZATION_FAILED
    finally:
        stop(proxy)


def test_no_request_before_authentication_makes_a_quota_name(front):
    """ApiVersions, SaslHandshake and SaslAuthenticate before authentication are Kafka's
    authenticator's: nothing recorded, no sensor, no client-id name held, however many client
    ids an unauthenticated client makes up. Once authenticated, ApiVersions is recorded."""
    proxy = start(front)
    try:
        proxy.qm.alter_client_quotas([({"user": "alice"}, {"request_percentage": 1000.0}),
                                      ({"user": None}, {"request_percentage": 1000.0})])
        held = proxy.qm._name_bytes()[0]
        sensors = proxy.qm.sensor_count(REQUEST)
        for i in range(30):
            w = Wire(proxy.proxy.bootstrap_address, f"made-up-{i}-" + "x" * 200)
            assert w.call(apis.API_VERSIONS, 3, "ApiVersions", {"ClientSoftwareName": "a", "ClientSoftwareVersion": "1"})[
                "ErrorCode"] == 0
            assert handshake(w, "SCRAM-SHA-512") == 0
            authenticate(w, b"n,,n=alice,r=x")
            w.close()
        assert proxy.qm._name_bytes()[0] == held
        assert proxy.qm.sensor_count(REQUEST) == sensors
        w = Wire(proxy.proxy.bootstrap_address, "after")
        assert scram_login(w, "alice", SaslFront.USERS["alice"])["ErrorCode"] == 0
        w.call(apis.API_VERSIONS, 3, "ApiVersions", {"ClientSoftwareName": "a", "ClientSoftwareVersion": "1"})
        assert wait_until(lambda: proxy.qm.measured_rate(REQUEST, "alice", "after") > 0, 10)
    finally:
        stop(proxy)


def test_plaintext_listener_is_authenticated_from_the_start_and_refuses_sasl(front):
    """Without SASL on the listener the connection is ANONYMOUS from the start: ApiVersions is
    recorded as Kafka's ``KafkaApis`` records it, and SaslHandshake / SaslAuthenticate are
    answered ILLEGAL_SASL_STATE (KafkaApis), so no token can change the principal."""
    qm = kquota.QuotaManager(window_num=2, window_size_seconds=1)
    qm.alter_client_quotas([({"user": None}, {"request_percentage": 1000.0})])
    proxy = ProxyThread(("127.0.0.1", front.port), qm=qm, admin_principals=["admin"])
    try:
        w = Wire(proxy.proxy.bootstrap_address, "plain-client")
        w.call(apis.API_VERSIONS, 3, "ApiVersions", {"ClientSoftwareName": "a", "ClientSoftwareVersion": "1"})
        assert wait_until(lambda: qm.measured_rate(REQUEST, "ANONYMOUS", "plain-client") > 0, 10)
        assert handshake(w, "PLAIN") == ILLEGAL_SASL_STATE
        answer = authenticate(w, plain("admin", SaslFront.USERS["admin"]))
        assert answer["ErrorCode"] == ILLEGAL_SASL_STATE
        assert alter_victim(w) == apis.CLUSTER_AUTHORIZATION_FAILED
        assert "admin" not in front.users[-1:]  # the broker never saw the token
    finally:
        stop(proxy)


class ClusterActionBroker:
    """A broker answering every request with an empty body after its correlation id (what the
    proxy relays unparsed), recording the API keys it was sent."""

    def __init__(self) -> None:
        self.keys: list[int] = []
        self._server = LoopbackServer(self._serve)
        self.port = self._server.port

    def _serve(self, client) -> None:
        while (frame := read_frame(client)) is not None:
            h = parse_request_header(frame)
            self.keys.append(h.api_key)
            client.sendall(struct.pack(">ii", 8, h.correlation_id) + b"\x00\x00\x00\x00")

    def stop(self) -> None:
        self._server.stop()


@pytest.mark.parametrize("api_key", [4, 5, 6, 27, 56, 67])
def test_cluster_action_keys_are_charged_to_the_client(api_key):
    """LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, WriteTxnMarkers,
    AlterPartition, AllocateProducerIds: exempt at a broker because only brokers send them; a
    client sending them through the proxy is charged for them like any request."""
    broker = ClusterActionBroker()
    qm = kquota.QuotaManager(window_num=2, window_size_seconds=1)
    qm.alter_client_quotas([({"user": None}, {"request_percentage": 1000.0})])
    proxy = ProxyThread(("127.0.0.1", broker.port), qm=qm)
    try:
        w = Wire(proxy.proxy.bootstrap_address, "fake-broker")
        for _ in range(3):
            w.send_raw(w.frame(api_key, 0, b"\x00" * 16))
            w.read_frame()
        assert broker.keys == [api_key] * 3
        assert wait_until(lambda: qm.measured_rate(REQUEST, "ANONYMOUS", "fake-broker") > 0, 10)
    finally:
        proxy.stop()
        qm.close()
        broker.stop()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
def test_real_clients_are_charged_to_the_principal_they_authenticated(front, mechanism):
    """librdkafka (confluent-kafka) through the proxy, each mechanism: its Produce is charged to
    alice, nothing to ANONYMOUS."""
    from confluent_kafka import Producer

    proxy = start(front)
    try:
        proxy.qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 1e9}),
                                      ({"user": None}, {"producer_byte_rate": 1e9})])
        topic = make_topic(f"127.0.0.1:{front.port}")  # at the front: the proxy admits only SASL clients
        conf = {"bootstrap.servers": proxy.address, "client.id": "real", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism}
        if mechanism == "OAUTHBEARER":
            token = jwt({"sub": "alice"}, SaslFront.OAUTH_KEY).decode()
            conf["oauth_cb"] = lambda _config: (token, time.time() + 3600, "alice")
        else:
            conf.update({"sasl.username": "alice", "sasl.password": SaslFront.USERS["alice"]})
        p = Producer(conf)
        for _ in range(20):
            p.produce(topic, b"v" * 1000)
        assert p.flush(30) == 0
        assert "alice" in front.users
        assert proxy.qm.measured_rate(PRODUCE, "alice", "real") > 0
        assert proxy.qm.measured_rate(PRODUCE, "ANONYMOUS", "real") == 0
    finally:
        stop(proxy)
