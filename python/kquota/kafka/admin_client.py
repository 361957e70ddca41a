"""A blocking Kafka admin connection for the client-quota APIs (KIP-546): DescribeClientQuotas
and AlterClientQuotas, ``ip`` entities (KIP-612) and ``ValidateOnly`` included.

No installed Kafka client implements both (confluent-kafka's ``AdminClient`` has neither,
kafka-python's ``KafkaAdminClient`` and aiokafka's admin client have neither method, only
DescribeClientQuotas' request structs), so requests are framed with kquota's own codec
(:mod:`kquota.kafka.protocol.codec`, Kafka's transcribed schemas), after an ApiVersions exchange
picks the highest version both sides speak. Connections are TLS (Python's :mod:`ssl`) and SASL/PLAIN
(SaslHandshake v1 + SaslAuthenticate) as :mod:`kquota.kafka.client_security` reads the client properties.

    with AdminConnection("127.0.0.1:9092") as admin:
        entries = admin.describe_client_quotas([], strict=False)
"""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any, Optional

from kquota.kafka.client_security import ClientSecurity
from kquota.exceptions import KQuotaError
from kquota.kafka.protocol import apis
from kquota.kafka.protocol.codec import CodecError, decode_body, encode_body, is_flexible
from kquota.kafka.protocol.frames import response_body_offset

__all__ = ["AdminConnection", "KafkaApiError", "error_name", "parse_host_port"]

_I32 = struct.Struct(">i")
_MAX_FRAME = 100 * 1024 * 1024  # a bound on what a peer can make us allocate

#: Kafka's exception class of the error codes an admin answer carries (``Errors.java``).
_ERROR_NAMES = {
    -1: "UnknownServerException", 7: "RequestTimedOutException", 29: "TopicAuthorizationException",
    31: "ClusterAuthorizationException", 33: "UnsupportedSaslMechanismException",
    34: "IllegalSaslStateException", 35: "UnsupportedVersionException", 40: "InvalidConfigurationException",
    41: "NotControllerException", 42: "InvalidRequestException", 44: "PolicyViolationException",
    58: "SaslAuthenticationException",
}


def error_name(code: int) -> str:
    """Kafka's exception name for an error code (``KafkaException(code)`` if not listed)."""
    return _ERROR_NAMES.get(code, f"KafkaException(error code {code})")


class KafkaApiError(KQuotaError):
    """A whole request refused by the cluster: ``code`` and Kafka's message."""

    def __init__(self, code: int, message: Optional[str]) -> None:
        super().__init__(f"{error_name(code)}: {message or 'no message'}")
        self.code = code


def parse_host_port(text: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (``[v6]:port`` too; a ``PROTOCOL://`` prefix is dropped)."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise KQuotaError(f"--bootstrap-server {text!r}: expected HOST:PORT[,HOST:PORT...]")
        out.append((host, int(port)))
    return out


class AdminConnection:
    """One connection to a broker (or a ``kquota proxy``) for the client-quota APIs."""

    def __init__(self, bootstrap: str, security: Optional[ClientSecurity] = None, timeout: float = 30.0,
                 client_id: str = "kquota-configs") -> None:
        self.security = security or ClientSecurity()
        self.client_id = client_id.encode()
        self.corr = 0
        failures = []
        for self.host, self.port in parse_host_port(bootstrap):  # the first that accepts, as Kafka's bootstrap
            self.where = f"{self.host}:{self.port}"
            try:
                raw = socket.create_connection((self.host, self.port), timeout=timeout)
                break
            except OSError as e:
                failures.append(f"{self.where}: {e.strerror or e}")
        else:
            raise KQuotaError("cannot connect to " + "; ".join(failures))
        self.sock: socket.socket = raw
        try:
            if self.security.ssl_context is not None:
                try:
                    self.sock = self.security.ssl_context.wrap_socket(raw, server_hostname=self.host)
                except ssl.SSLCertVerificationError as e:
                    raise KQuotaError(f"TLS handshake with {self.where} failed: certificate verify failed: "
                                      f"{e.verify_message}") from None
                except (ssl.SSLError, OSError) as e:
                    raise KQuotaError(f"TLS handshake with {self.where} failed: {e}") from None
            self.versions = self._api_versions()
            if self.security.sasl:
                self._authenticate()
        except BaseException:
            self.sock.close()
            raise

    def __enter__(self) -> "AdminConnection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    # ------------------------------------------------------------------------ framing

    def _exchange(self, api_key: int, version: int, body: bytes) -> tuple[bytes, int]:
        """Sends one request, returns (response frame, where its body starts)."""
        self.corr += 1
        head = struct.pack(">hhih", api_key, version, self.corr, len(self.client_id)) + self.client_id
        if is_flexible(api_key, version):
            head += b"\x00"  # no tagged fields in the header
        try:
            self.sock.sendall(_I32.pack(len(head) + len(body)) + head + body)
            size = _I32.unpack(self._exact(4))[0]
            if not 4 <= size <= _MAX_FRAME:
                raise KQuotaError(f"{self.where} answered a frame of {size} bytes: not a Kafka broker?")
            frame = self._exact(size)
        except (socket.timeout, TimeoutError):
            raise KQuotaError(f"{self.where} did not answer in time") from None
        except ssl.SSLError as e:
            # A server refusing the client's certificate (or its absence) answers, in TLS 1.3, after
            # the handshake: an alert or a bare close, whichever this read meets first.
            raise KQuotaError(f"TLS connection to {self.where} failed: {e.reason or e}{self._tls_hint()}") from None
        except OSError as e:
            raise KQuotaError(f"connection to {self.where} failed: {e.strerror or e}") from None
        if _I32.unpack_from(frame)[0] != self.corr:
            raise KQuotaError(f"{self.where} answered another request (correlation id mismatch)")
        if api_key == apis.API_VERSIONS:
            return frame, 4  # ApiVersions responses have header v0 at every version
        return frame, response_body_offset(frame, api_key, version)

    def exchange(self, api_key: int, version: int, body: bytes) -> tuple[bytes, int]:
        """One request of an API this module has no schema for, already encoded: (response
        frame, where its body starts)."""
        return self._exchange(api_key, version, body)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                if self.security.ssl_context is not None:
                    raise KQuotaError(f"TLS connection to {self.where} failed: closed by the server{self._tls_hint()}")
                raise KQuotaError(f"{self.where} closed the connection (wrong security.protocol?)")
            buf += chunk
        return bytes(buf)

    def _tls_hint(self) -> str:
        if self.security.client_certificate:
            return ""
        return " (if the server requires a client certificate: set ssl.keystore.location)"

    def call(self, name: str, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
        """Request ``name`` at the highest version both sides speak; the decoded response."""
        version = self._version(api_key, name)
        frame, pos = self._exchange(api_key, version, bytes(encode_body(name + "Request", version, body)))
        try:
            return decode_body(name + "Response", version, frame, pos)
        except CodecError as e:
            raise KQuotaError(f"{self.where} sent an unreadable {name} response: {e}") from None

    def _version(self, api_key: int, name: str) -> int:
        ours = apis.PARSED_VERSIONS[api_key]
        theirs = self.versions.get(api_key)
        if theirs is None or theirs[1] < ours[0] or theirs[0] > ours[1]:
            # As Kafka's admin client words it: the node's ApiVersions answer lacks the API.
            raise KQuotaError(f"UnsupportedVersionException: {self.where} does not support {name} (API key "
                              f"{api_key}" + (f", versions {theirs[0]}-{theirs[1]}" if theirs else "") + ")")
        return min(ours[1], theirs[1])

    # ------------------------------------------------------------------------ handshakes

    def _api_versions(self) -> dict[int, tuple[int, int]]:
        try:
            frame, pos = self._exchange(apis.API_VERSIONS, 0, bytes(encode_body("ApiVersionsRequest", 0, {})))
            resp = decode_body("ApiVersionsResponse", 0, frame, pos)
        except CodecError as e:
            raise KQuotaError(f"{self.where} is not a Kafka broker (ApiVersions: {e})") from None
        if resp["ErrorCode"]:
            raise KafkaApiError(resp["ErrorCode"], "ApiVersions refused")
        return {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in resp["ApiKeys"] or []}

    def _authenticate(self) -> None:
        mech = self.security.sasl_mechanism or "PLAIN"
        self._version(apis.SASL_HANDSHAKE, "SaslHandshake")
        frame, pos = self._exchange(apis.SASL_HANDSHAKE, 1, bytes(encode_body("SaslHandshakeRequest", 1,
                                                                              {"Mechanism": mech})))
        code = struct.unpack_from(">h", frame, pos)[0]
        if code:
            raise KafkaApiError(code, f"{self.where} does not accept SASL mechanism {mech}")
        token = b"\x00" + (self.security.username or "").encode() + b"\x00" + (self.security.password or "").encode()
        resp = self.call("SaslAuthenticate", apis.SASL_AUTHENTICATE, {"AuthBytes": token})
        if resp["ErrorCode"]:
            raise KafkaApiError(resp["ErrorCode"], resp.get("ErrorMessage") or "authentication failed")

    # ------------------------------------------------------------------------ the two APIs

    def describe_client_quotas(self, components: list[dict[str, Any]], strict: bool) -> list[dict[str, Any]]:
        """DescribeClientQuotas: the response's ``Entries`` (``KafkaApiError`` if refused)."""
        resp = self.call("DescribeClientQuotas", apis.DESCRIBE_CLIENT_QUOTAS,
                         {"Components": components, "Strict": strict})
        if resp["ErrorCode"]:
            raise KafkaApiError(resp["ErrorCode"], resp.get("ErrorMessage"))
        return list(resp["Entries"] or [])

    def alter_client_quotas(self, entries: list[dict[str, Any]], validate_only: bool) -> list[dict[str, Any]]:
        """AlterClientQuotas, all entries in one request: the per-entry results."""
        resp = self.call("AlterClientQuotas", apis.ALTER_CLIENT_QUOTAS,
                         {"Entries": entries, "ValidateOnly": validate_only})
        return list(resp["Entries"] or [])
