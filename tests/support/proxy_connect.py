"""Raw client connections for the connection-quota tests: a socket bound to a chosen loopback
source address (no Kafka client binds its source address), an optional PROXY protocol header
sent as a load balancer would, then a Kafka ApiVersions v0 request; served means answered."""

from __future__ import annotations

import ipaddress
import socket
import struct
import time
from dataclasses import dataclass
from typing import Optional

from proxy_wire import read_exact

#: ApiVersions v0 (header v1: key 18, version 0, correlation id, client id "storm"; no body).
_CORRELATION = 7
API_VERSIONS = struct.pack(">ihhih", 2 + 2 + 4 + 2 + 5, 18, 0, _CORRELATION, 5) + b"storm"
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def proxy_v1(src: str, sport: int = 40000, dport: int = 9092) -> bytes:
    """A v1 (text) header naming client ``src``."""
    family, dst = ("TCP6", "::1") if ":" in src else ("TCP4", "127.0.0.1")
    return f"PROXY {family} {src} {dst} {sport} {dport}\r\n".encode()


def proxy_v2(src: str, dst: str = "127.0.0.1", sport: int = 40000, dport: int = 9092, *, local: bool = False,
             tlv: bytes = b"") -> bytes:
    """A v2 (binary) header naming client ``src`` (TCP over IPv4 or IPv6), or LOCAL."""
    if local:
        return V2_SIGNATURE + bytes([0x20, 0x00]) + struct.pack(">H", 0)
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst if ":" not in src else "::1")
    family = 0x11 if s.version == 4 else 0x21
    addrs = s.packed + d.packed + struct.pack(">HH", sport, dport) + tlv
    return V2_SIGNATURE + bytes([0x21, family]) + struct.pack(">H", len(addrs)) + addrs


@dataclass
class Attempt:
    served: bool
    #: Seconds from connect to the answer, or to the proxy's close.
    seconds: float


def connect(port: int, source: str = "127.0.0.1", *, header: bytes = b"", timeout: float = 5.0) -> socket.socket:
    """A socket from ``source`` to the proxy, ``header`` sent first."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    if header:
        sock.sendall(header)
    return sock


def api_versions(sock: socket.socket) -> bool:
    """Sends ApiVersions v0 and reads its answer: False when the proxy closes instead."""
    try:
        sock.sendall(API_VERSIONS)
        size = struct.unpack(">i", read_exact(sock, 4))[0]
        body = read_exact(sock, size)
    except (ConnectionError, OSError):
        return False
    return struct.unpack(">i", body[:4])[0] == _CORRELATION and body[4:6] == b"\x00\x00"


def attempt(port: int, source: str = "127.0.0.1", *, header: bytes = b"", timeout: float = 5.0) -> Attempt:
    """One connection: connect, ApiVersions, close."""
    start = time.monotonic()
    try:
        sock = connect(port, source, header=header, timeout=timeout)
    except OSError:
        return Attempt(False, time.monotonic() - start)
    with sock:
        served = api_versions(sock)
    return Attempt(served, time.monotonic() - start)


def closed_by_proxy(sock: socket.socket, timeout: float = 5.0) -> Optional[float]:
    """Seconds until the proxy closes ``sock`` without answering (None: still open)."""
    start = time.monotonic()
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return time.monotonic() - start
    except (ConnectionResetError, BrokenPipeError):
        return time.monotonic() - start
    except socket.timeout:
        return None

