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

SASL_AUTHENTICATION_FAILED = 58
ILLEGAL_SASL_STATE = 34  # Errors.ILLEGAL_SASL_STATE
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


def scram_login(w: Wire, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> dict:
    """A whole SCRAM exchange as a client that knows ``password``: the final answer."""
    assert handshake(w, mechanism) == 0
    first_bare = b"n=" + user.encode() + b",r=" + base64.b64encode(os.urandom(12))
    server_first = authenticate(w, b"n,," + first_bare)
    assert server_first["ErrorCode"] == 0 and bytes(server_first["AuthBytes"]).startswith(b"r="), server_first
    hash_name = "sha512" if mechanism.endswith("512") else "sha256"
    return authenticate(w, scram_client_final(password, first_bare, bytes(server_first["AuthBytes"]), hash_name))


def plane_users(proxy: Any) -> set:
    """The principal the native plane holds for each open connection (what Produce and Fetch
    are charged to)."""
    plane = proxy.proxy._plane
    return {plane.user(cid) for cid in list(proxy.proxy._bridged)}
