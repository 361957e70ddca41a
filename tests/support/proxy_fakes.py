"""Brokers for the proxy tests that need what Apache Kafka's broker does not do on demand: a SASL
front (tansu behind it) that authenticates as Kafka's ``SaslServerAuthenticator`` and can be told
to behave as a broker that is not Kafka (``lenient``), a broker that records the Fetch requests
it is sent, and one that names another broker in every answer (KIP-951). They speak real Kafka
frames (kquota's transcribed schemas) on loopback, one thread per connection, and relay or answer
requests one at a time."""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from typing import Any, Callable, Optional

from kquota.kafka.protocol.codec import decode_body, encode_body
from kquota.kafka.protocol.frames import parse_request_header, response_frame
from kafka_sasl import SASL_AUTHENTICATION_FAILED, OAuthBearerServer, PlainServer, SaslFailed, ScramServer
from proxy_support import Tansu
from waiting import free_port

_I32 = struct.Struct(">i")


def read_frame(sock: socket.socket) -> Optional[bytes]:
    """One frame without its size prefix (``None`` when the peer closed)."""
    def exact(n: int) -> Optional[bytes]:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    prefix = exact(4)
    if prefix is None:
        return None
    return exact(_I32.unpack(prefix)[0])


class LoopbackServer:
    """A threaded loopback server calling ``serve(client socket)`` per connection."""

    def __init__(self, serve: Callable[[socket.socket], None], port: int = 0) -> None:
        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    serve(self.request)
                except OSError:
                    pass

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SaslFront:
    """tansu behind a front that authenticates SASL as Kafka's ``SaslServerAuthenticator`` does
    (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER; round by round, see :mod:`kafka_sasl`) and relays
    every other request to tansu, which advertises the front's port. A failed round is answered
    SASL_AUTHENTICATION_FAILED and the connection closed; a second handshake while one is under
    way closes it; a SaslAuthenticate after authentication is answered ILLEGAL_SASL_STATE
    (``KafkaApis``); a KIP-368 re-authentication as another principal fails and closes.
    ``require_auth``: other requests before authentication close the connection, as Kafka's
    authenticator does (off: they are relayed, a test's unauthenticated ANONYMOUS client).
    ``lenient``: a broker that is not Kafka, to show the proxy trusts no ErrorCode 0 alone: a
    failed SCRAM proof is answered ErrorCode 0 with the server-final ``e=invalid-proof`` (RFC
    5802) and the connection kept, and a re-authentication as another principal is accepted.
    ``users`` lists the principals authenticated, in order. ``advertised_port``: the port tansu
    advertises (a TLS front's; default the front's own)."""

    USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "proxy": "proxy-secret"}
    OAUTH_KEY = b"front-jwks-key"
    MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

    def __init__(self, advertised_port: Optional[int] = None, require_auth: bool = False,
                 lenient: bool = False) -> None:
        port = free_port()
        self.broker = Tansu(advertised_port=advertised_port or port)
        self.users: list[str] = []
        self.require_auth = require_auth
        self.lenient = lenient
        self._server = LoopbackServer(self._serve, port)
        self.port = port

    def _mechanism(self, name: str) -> Any:
        if name == "PLAIN":
            return PlainServer(self.USERS)
        if name.startswith("SCRAM-"):
            return ScramServer(name, self.USERS)
        return OAuthBearerServer(self.OAUTH_KEY)

    def _serve(self, client: socket.socket) -> None:
        principal: Optional[str] = None
        server: Any = None  # the mechanism's server while an exchange is under way
        with socket.create_connection(("127.0.0.1", self.broker.port)) as up:
            while (frame := read_frame(client)) is not None:
                h = parse_request_header(frame)
                if h.api_key == 17:  # SaslHandshake v0-1: ErrorCode, Mechanisms
                    if server is not None:
                        return  # IllegalSaslStateException: a handshake during authentication
                    mech = decode_body("SaslHandshakeRequest", h.api_version, frame, h.body_offset)["Mechanism"]
                    code = 0 if mech in self.MECHANISMS else 33  # UNSUPPORTED_SASL_MECHANISM
                    names = [m.encode() for m in self.MECHANISMS]
                    body = struct.pack(">hi", code, len(names)) + b"".join(struct.pack(">h", len(m)) + m for m in names)
                    client.sendall(response_frame(h.correlation_id, 17, h.api_version, body))
                    if code:
                        return
                    server = self._mechanism(mech)
                elif h.api_key == 36:
                    if server is None and principal is None:
                        return  # a token before any handshake
                    if server is None:  # KafkaApis, after authentication
                        self._answer(client, h, 34, b"", "SaslAuthenticate request received after successful "
                                     "authentication")
                        continue
                    token = bytes(decode_body("SaslAuthenticateRequest", h.api_version, frame,
                                              h.body_offset)["AuthBytes"])
                    try:
                        challenge = server.evaluate(token)
                        if server.principal is not None and principal not in (None, server.principal) \
                                and not self.lenient:
                            raise SaslFailed(f"Cannot change principals during re-authentication from User.{principal}: "
                                             f"User.{server.principal}")
                    except SaslFailed as e:
                        if self.lenient and isinstance(server, ScramServer) and server.state == "failed":
                            self._answer(client, h, 0, b"e=invalid-proof", None)
                            server = None
                            continue
                        self._answer(client, h, SASL_AUTHENTICATION_FAILED, b"", str(e))
                        return
                    self._answer(client, h, 0, challenge, None)
                    if server.principal is not None:
                        principal = server.principal
                        self.users.append(principal)
                        server = None
                elif h.api_key != 18 and principal is None and (self.require_auth or server is not None):
                    return  # IllegalSaslStateException: an unexpected request before authentication
                else:
                    up.sendall(_I32.pack(len(frame)) + frame)
                    answer = read_frame(up)
                    if answer is None:
                        return
                    client.sendall(_I32.pack(len(answer)) + answer)

    @staticmethod
    def _answer(client: socket.socket, h: Any, code: int, auth_bytes: bytes, message: Optional[str]) -> None:
        body = encode_body("SaslAuthenticateResponse", h.api_version, {
            "ErrorCode": code, "ErrorMessage": message, "AuthBytes": auth_bytes, "SessionLifetimeMs": 0})
        client.sendall(response_frame(h.correlation_id, 36, h.api_version, body))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.stop()
        self.broker.stop()


class FetchRecorder:
    """A broker answering every Fetch (v4+) with an empty response and recording each request's
    decoded body in ``requests`` (what the proxy really sent on)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._server = LoopbackServer(self._serve)
        self.port = self._server.port

    def _serve(self, client: socket.socket) -> None:
        while (frame := read_frame(client)) is not None:
            h = parse_request_header(frame)
            assert h.api_key == 1, h
            self.requests.append(decode_body("FetchRequest", h.api_version, frame, h.body_offset))
            body = encode_body("FetchResponse", h.api_version, {
                "ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0, "Responses": []})
            client.sendall(response_frame(h.correlation_id, 1, h.api_version, body))

    def stop(self) -> None:
        self._server.stop()


class EndpointsBroker:
    """A broker whose Produce (v10+) and Fetch (v16+) answers name another broker in their
    NodeEndpoints (KIP-951: what Kafka's broker does after a leader change, here in every answer):
    Produce answers one partition; Fetch answers ``MaxBytes`` bytes of records (a
    repeating pattern), so a test picks a response small enough to be held whole or large
    enough to be streamed. Metadata (v12) names the same broker. ``endpoint_host`` and
    ``endpoint_port`` are the address it gives that broker (an impossible one: a broker
    answering garbage)."""

    HOST = "broker-seven.cluster.internal"
    NODE = 7

    def __init__(self, endpoint_host: str = HOST, endpoint_port: int = 9092) -> None:
        self.endpoint_host = endpoint_host
        self.endpoint_port = endpoint_port
        self._server = LoopbackServer(self._serve)
        self.port = self._server.port

    @staticmethod
    def records(size: int) -> bytes:
        return bytes(i % 251 for i in range(size))

    def _serve(self, client: socket.socket) -> None:
        endpoints = [{"NodeId": self.NODE, "Host": self.endpoint_host, "Port": self.endpoint_port, "Rack": None}]
        while (frame := read_frame(client)) is not None:
            h = parse_request_header(frame)
            if h.api_key == 0:
                body = encode_body("ProduceResponse", h.api_version, {
                    "Responses": [{"Name": "t", "PartitionResponses": [{"Index": 0, "ErrorCode": 0, "BaseOffset": 5}]}],
                    "ThrottleTimeMs": 0, "NodeEndpoints": endpoints})
            elif h.api_key == 1:
                req = decode_body("FetchRequest", h.api_version, frame, h.body_offset)
                body = encode_body("FetchResponse", h.api_version, {
                    "ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0, "NodeEndpoints": endpoints,
                    "Responses": [{"TopicId": b"\x01" * 16, "Partitions": [{
                        "PartitionIndex": 0, "ErrorCode": 0, "HighWatermark": 1, "LastStableOffset": 1,
                        "LogStartOffset": 0, "AbortedTransactions": None, "PreferredReadReplica": -1,
                        "Records": self.records(req["MaxBytes"])}]}]})
            elif (h.api_key, h.api_version) == (3, 12):
                body = encode_body("MetadataResponse", 12, {
                    "ThrottleTimeMs": 0, "Brokers": endpoints, "ClusterId": "c", "ControllerId": self.NODE,
                    "Topics": []})
            else:
                return
            client.sendall(response_frame(h.correlation_id, h.api_key, h.api_version, body))

    def stop(self) -> None:
        self._server.stop()
