"""Kafka frames: the 4-byte size prefix, request and response headers.

Request header v1/v2 (v2 adds tagged fields; the client id keeps its int16 length in both, as
Kafka's ``RequestHeader.json`` says); response header v0/v1 (v1 adds tagged fields), ApiVersions
responses always v0 so that any client can read them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kquota.kafka.protocol.codec import CodecError, is_flexible, skip_tagged_fields, write_uvarint

API_VERSIONS = 18
CONTROLLED_SHUTDOWN = 7
_HDR = struct.Struct(">hhih")
_I32 = struct.Struct(">i")


@dataclass
class RequestHeader:
    """The fields of a request header and where the body starts."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    body_offset: int


def parse_request_header(frame: bytes) -> RequestHeader:
    """Parses a request header (any API, any version)."""
    if len(frame) < _HDR.size:
        raise CodecError("request shorter than its header")
    api_key, version, corr, n = _HDR.unpack_from(frame, 0)
    pos = _HDR.size
    if api_key == CONTROLLED_SHUTDOWN and version == 0:
        raise CodecError("ControlledShutdown v0 (header v0) is not supported")
    client_id = ""
    if n >= 0:
        if pos + n > len(frame):
            raise CodecError("truncated client id")
        try:
            client_id = frame[pos:pos + n].decode("utf-8")
        except UnicodeDecodeError:
            raise CodecError("client id is not UTF-8") from None
        pos += n
    elif n != -1:
        raise CodecError("negative client id length")
    if api_key >= 0 and is_flexible(api_key, version):
        pos = skip_tagged_fields(frame, pos, "header tagged fields")
    return RequestHeader(api_key, version, corr, client_id, pos)


def response_header_flexible(api_key: int, version: int) -> bool:
    """Whether the response header carries tagged fields (never for ApiVersions)."""
    return api_key != API_VERSIONS and is_flexible(api_key, version)


def response_body_offset(frame: bytes, api_key: int, version: int) -> int:
    """Where the body of a response frame (without size prefix) starts."""
    if len(frame) < 4:
        raise CodecError("response shorter than its header")
    pos = 4
    if response_header_flexible(api_key, version):
        pos = skip_tagged_fields(frame, pos, "response header")
    return pos


def response_frame(correlation_id: int, api_key: int, version: int, body: bytes | bytearray) -> bytes:
    """A whole response frame, size prefix included."""
    head = bytearray(_I32.pack(correlation_id))
    if response_header_flexible(api_key, version):
        write_uvarint(head, 0)
    return _I32.pack(len(head) + len(body)) + bytes(head) + bytes(body)


def with_prefix(frame: bytes) -> bytes:
    """``frame`` with its 4-byte size prefix."""
    return _I32.pack(len(frame)) + frame
