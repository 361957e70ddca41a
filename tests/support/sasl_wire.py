"""SASL exchanges a client writes by hand through a proxy (raw frames, kquota's codec): the
attacks on the proxy's principal, and the checks of what the proxy made of them."""

from __future__ import annotations

import base64
import os
import struct
from typing import Any

from kafka_sasl import scram_client_final
from kquota.kafka.protocol import apis
from kquota.kafka.protocol.codec import encode_body
from proxy_wire import Wire
from waiting import wait_until

SASL_AUTHENTICATION_FAILED = 58
ILLEGAL_SASL_STATE = 34  # Errors.ILLEGAL_SASL_STATE
CREATE_DELEGATION_TOKEN = 38
#: An AlterClientQuotas entry an attacker would love: the victim throttled to a byte a second.
VICTIM = [{"Entity": [{"EntityType": "user", "EntityName": "victim"}],
           "Ops": [{"Key": "producer_byte_rate", "Value": 1.0, "Remove": False}]}]


def handshake(w: Wire, mechanism: str) -> int:
    """SaslHandshake v1; its ErrorCode (the response is ErrorCode, Mechanisms)."""
    w.send_raw(w.frame(apis.SASL_HANDSHAKE, 1, bytes(encode_body("SaslHandshakeRequest", 1, {"Mechanism": mechanism}))))
    return struct.unpack_from(">h", w.read_frame(), 4)[0]


def authenticate(w: Wire, token: bytes) -> dict:
    return w.call(apis.SASL_AUTHENTICATE, 2, "SaslAuthenticate", {"AuthBytes": token})


def alter_victim(w: Wire) -> int:
    return w.call(apis.ALTER_CLIENT_QUOTAS, 1, "AlterClientQuotas", {"Entries": VICTIM, "ValidateOnly": False})[
        "Entries"][0]["ErrorCode"]


def describe(w: Wire) -> dict:
    return w.call(apis.DESCRIBE_CLIENT_QUOTAS, 1, "DescribeClientQuotas", {"Components": [], "Strict": False})


def refused(w: Wire, token: bytes) -> bool:
    """The round is answered SASL_AUTHENTICATION_FAILED and the connection closed, as Kafka
    does (the broker's close may overtake its answer through the proxy: then only the close)."""
    try:
        code = authenticate(w, token)["ErrorCode"]
    except ConnectionError:
        return True
    return code == SASL_AUTHENTICATION_FAILED and w.closed_by_peer()


def closed_unauthenticated(w: Wire, call: Any) -> bool:
    """``call(w)`` on a connection of a SASL listener that has not completed an exchange: the
    proxy closes it without an answer, as Kafka's authenticator closes a client that sends
    anything but ApiVersions or SASL before authenticating (``IllegalSaslStateException``)."""
    try:
        call(w)
    except ConnectionError:
        return True
    return False


def plain(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


def scram_first_bare(user: str, tokenauth: bool = False) -> bytes:
    """A SCRAM client-first message without its gs2 header (RFC 5802; ``tokenauth=true``, Kafka's
    extension after the nonce, makes ``user`` a delegation token's id)."""
    name = user.replace("=", "=3D").replace(",", "=2C").encode()
    return b"n=" + name + b",r=" + base64.b64encode(os.urandom(12)) + (b",tokenauth=true" if tokenauth else b"")


def scram_login(w: Wire, user: str, password: str, mechanism: str = "SCRAM-SHA-512", tokenauth: bool = False) -> dict:
    """A whole SCRAM exchange as a client that knows ``password``: the final answer (with
    ``tokenauth``: a delegation token's, ``user`` its id and ``password`` its HMAC in base64)."""
    assert handshake(w, mechanism) == 0
    first_bare = scram_first_bare(user, tokenauth)
    server_first = authenticate(w, b"n,," + first_bare)
    assert server_first["ErrorCode"] == 0 and bytes(server_first["AuthBytes"]).startswith(b"r="), server_first
    hash_name = "sha512" if mechanism.endswith("512") else "sha256"
    return authenticate(w, scram_client_final(password, first_bare, bytes(server_first["AuthBytes"]), hash_name))


def plane_users(proxy: Any) -> set:
    """The principal the native plane holds for each open connection (what Produce and Fetch
    are charged to)."""
    plane = proxy.proxy._plane
    return {plane.user(cid) for cid in list(proxy.proxy._bridged)}


def token_login(w: Wire, token: tuple[str, str]) -> dict:
    """A SCRAM-SHA-256 exchange with a delegation token (id, HMAC in base64): the final answer."""
    return scram_login(w, token[0], token[1], "SCRAM-SHA-256", tokenauth=True)


def create_delegation_token(address: tuple[str, int], user: str, password: str, timeout: float = 30.0) -> tuple[str, str]:
    """A delegation token ``user`` creates for itself (KIP-48) at the broker's SASL listener
    ``address``, logged in with PLAIN: (token id, HMAC in base64, the token's SCRAM password).

    CreateDelegationToken v1 (no renewers, the broker's default lifetime) is written by hand:
    kquota's codec has no schema for it. The broker answers once the controller has the token;
    its SCRAM credential reaches the broker's token cache with the metadata a moment later, so
    this returns only once the broker answers the token's client-first message."""
    w = Wire(address, "token-maker")
    try:
        assert handshake(w, "PLAIN") == 0
        assert authenticate(w, plain(user, password))["ErrorCode"] == 0
        w.send_raw(w.frame(CREATE_DELEGATION_TOKEN, 1, struct.pack(">iq", 0, -1)))  # Renewers: [], MaxLifetimeMs
        frame = w.read_frame()
    finally:
        w.close()
    pos = 4  # the correlation id
    error, pos = _i16(frame, pos)
    assert error == 0, (f"CreateDelegationToken refused: error code {error} (65: the broker has no "
                        "delegation.token.secret.key; a broker started by an older scripts/kafka.sh)")
    owner_type, pos = _string(frame, pos)
    owner, pos = _string(frame, pos)
    assert (owner_type, owner) == ("User", user)
    pos += 24  # IssueTimestampMs, ExpiryTimestampMs, MaxTimestampMs
    token_id, pos = _string(frame, pos)
    size = struct.unpack_from(">i", frame, pos)[0]
    hmac = frame[pos + 4:pos + 4 + size]
    assert len(frame) == pos + 4 + size + 4  # then ThrottleTimeMs
    known = wait_until(lambda: _token_known(address, token_id), timeout, 0.2)
    assert known, f"delegation token {token_id} unknown to the broker after {timeout} s"
    return token_id, base64.b64encode(hmac).decode()


def _token_known(address: tuple[str, int], token_id: str) -> bool:
    """The broker answers the token's client-first message with its challenge (an unknown
    token: SASL_AUTHENTICATION_FAILED)."""
    w = Wire(address, "token-check")
    try:
        assert handshake(w, "SCRAM-SHA-256") == 0
        return authenticate(w, b"n,," + scram_first_bare(token_id, tokenauth=True))["ErrorCode"] == 0
    finally:
        w.close()


def _i16(frame: bytes, pos: int) -> tuple[int, int]:
    return struct.unpack_from(">h", frame, pos)[0], pos + 2


def _string(frame: bytes, pos: int) -> tuple[str, int]:
    size, pos = _i16(frame, pos)
    return frame[pos:pos + size].decode(), pos + size
