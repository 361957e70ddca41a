"""SASL servers that answer round by round as Apache Kafka's do, for broker fronts in the proxy
tests (a front that says yes to every round is how a proxy that trusts ErrorCode 0 ships):

- :class:`PlainServer`: Kafka's ``PlainSaslServer``: one round, ``authzid NUL authcid NUL
  password``; an authzid other than the authcid or a wrong password fails; success is empty bytes.
- :class:`ScramServer`: Kafka's ``ScramSaslServer`` (RFC 5802): the client-first message is
  answered with the server-first challenge whoever it names (Kafka looks the user up there and
  fails an unknown one); only a client-final message whose proof verifies completes, answered
  with the server-final ``v=``. (Delegation tokens are tested against Kafka's broker.)
- :class:`OAuthBearerServer`: Kafka's ``OAuthBearerSaslServer``: a valid token (here: an HS256 JWT
  signed with the front's key, as a JWKS-validating broker) is answered with empty bytes; an
  invalid one with an ErrorCode-0 challenge carrying the error JSON, and the client's ``\\x01``
  round after it fails.

A failed round raises :class:`SaslFailed` (Kafka's ``SaslAuthenticationException``: ErrorCode
58, then the connection is closed)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from typing import Optional

SASL_AUTHENTICATION_FAILED = 58


class SaslFailed(Exception):
    """The round failed: Kafka answers SASL_AUTHENTICATION_FAILED with this message and closes."""


class PlainServer:
    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.principal: Optional[str] = None

    def evaluate(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = (p.decode() for p in parts)
        if authzid and authzid != user:
            raise SaslFailed("Authentication failed: Client requested an authorization id that is different from "
                             "username")
        if self.users.get(user) != password:
            raise SaslFailed("Authentication failed: Invalid username or password")
        self.principal = user
        return b""


def _hmac(key: bytes, msg: bytes, hash_name: str) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def scram_keys(password: str, salt: bytes, iterations: int, hash_name: str) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) of a SCRAM credential (RFC 5802), as Kafka's ``ScramFormatter``."""
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
    client_key = _hmac(salted, b"Client Key", hash_name)
    return hashlib.new(hash_name, client_key).digest(), _hmac(salted, b"Server Key", hash_name)


def scram_client_final(password: str, client_first_bare: bytes, server_first: bytes, hash_name: str) -> bytes:
    """The client-final message (with its proof) for ``password``: what a client who knows it sends."""
    fields = dict(f.split(b"=", 1) for f in server_first.split(b","))
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), base64.b64decode(fields[b"s"]), int(fields[b"i"]))
    client_key = _hmac(salted, b"Client Key", hash_name)
    without_proof = b"c=biws,r=" + fields[b"r"]
    auth_message = client_first_bare + b"," + server_first + b"," + without_proof
    signature = _hmac(hashlib.new(hash_name, client_key).digest(), auth_message, hash_name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    return without_proof + b",p=" + base64.b64encode(proof)


class ScramServer:
    ITERATIONS = 4096

    def __init__(self, mechanism: str, users: dict[str, str]) -> None:
        self.hash_name = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
        self.users = users
        self.principal: Optional[str] = None
        self.state = "first"
        self._auth: bytes = b""
        self._keys: tuple[bytes, bytes] = (b"", b"")
        self._nonce = b""
        self._name = ""

    def evaluate(self, token: bytes) -> bytes:
        if self.state == "first":
            return self._first(token)
        if self.state == "final":
            return self._final(token)
        raise SaslFailed(f"Unexpected challenge in Sasl server state {self.state}")

    def _first(self, token: bytes) -> bytes:
        fields = token.split(b",")
        if len(fields) < 4 or fields[0] != b"n" or not fields[2].startswith(b"n=") or not fields[3].startswith(b"r="):
            raise SaslFailed("Authentication failed: Invalid client first message")
        name = fields[2][2:].decode().replace("=2C", ",").replace("=3D", "=")
        if fields[1] and fields[1] != b"a=" + fields[2][2:]:
            raise SaslFailed("Authentication failed: Client requested an authorization id that is different from "
                             "username")
        password = self.users.get(name)
        if password is None:
            self.state = "failed"
            raise SaslFailed("Authentication failed: Invalid user credentials")
        salt = hashlib.sha256(name.encode()).digest()[:16]
        self._keys = scram_keys(password, salt, self.ITERATIONS, self.hash_name)
        self._nonce = fields[3][2:] + base64.b64encode(os.urandom(18))
        server_first = b"r=" + self._nonce + b",s=" + base64.b64encode(salt) + b",i=" + str(self.ITERATIONS).encode()
        self._auth = b",".join(fields[2:]) + b"," + server_first
        self._name = name
        self.state = "final"
        return server_first

    def _final(self, token: bytes) -> bytes:
        self.state = "failed"
        head, sep, proof = token.rpartition(b",p=")
        if not sep or not head.startswith(b"c=") or b",r=" + self._nonce not in head:
            raise SaslFailed("Authentication failed: Invalid client final message")
        auth_message = self._auth + b"," + head
        stored, server_key = self._keys
        signature = _hmac(stored, auth_message, self.hash_name)
        try:
            client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature))
        except ValueError:
            raise SaslFailed("Authentication failed: Invalid client final message") from None
        if hashlib.new(self.hash_name, client_key).digest() != stored:
            raise SaslFailed("Authentication failed: Invalid client final message")
        self.state = "complete"
        self.principal = self._name
        return b"v=" + base64.b64encode(_hmac(server_key, auth_message, self.hash_name))


def _b64url(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def jwt(claims: dict, key: Optional[bytes]) -> bytes:
    """A JWT: HS256-signed with ``key``, or unsigned (``alg: none``) when ``key`` is None."""
    header = _b64url(json.dumps({"alg": "HS256" if key else "none", "typ": "JWT"}).encode())
    payload = _b64url(json.dumps(claims).encode())
    signature = _b64url(_hmac(key, header + b"." + payload, "sha256")) if key else b""
    return header + b"." + payload + b"." + signature


def oauthbearer_token(token: bytes) -> bytes:
    """The OAUTHBEARER client-first response carrying ``token`` (RFC 7628)."""
    return b"n,,\x01auth=Bearer " + token + b"\x01\x01"


class OAuthBearerServer:
    def __init__(self, key: bytes) -> None:
        self.key = key
        self.principal: Optional[str] = None
        self._error: Optional[bytes] = None

    def evaluate(self, token: bytes) -> bytes:
        if token == b"\x01" and self._error is not None:
            raise SaslFailed(self._error.decode())
        self._error = None
        sub = self._valid_subject(token)
        if sub is None:
            self._error = json.dumps({"status": "invalid_token"}).encode()
            return self._error
        self.principal = sub
        return b""

    def _valid_subject(self, token: bytes) -> Optional[str]:
        for item in token.split(b"\x01")[1:]:
            if item.startswith(b"auth=Bearer "):
                parts = item[12:].split(b".")
                if len(parts) != 3 or not parts[2]:
                    return None
                expected = _b64url(_hmac(self.key, parts[0] + b"." + parts[1], "sha256"))
                if not hmac.compare_digest(expected, parts[2]):
                    return None
                claims = json.loads(base64.urlsafe_b64decode(parts[1] + b"=" * (-len(parts[1]) % 4)))
                return claims.get("sub")
        return None
