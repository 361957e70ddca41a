"""Kafka wire encoding: primitives and a generic codec driven by :mod:`kquota.kafka.protocol.schemas`.

A message decodes to a dict keyed by Kafka's field names (``"ThrottleTimeMs"``); ``records``
and ``bytes`` fields stay bytes (memoryview slices of the frame, never copied while decoding).
Tagged fields appear in the dict only when present on the wire, unknown tags are kept raw under
``"_tags"``, so decode followed by encode at the same version gives back the same bytes, except
that a known tagged field holding its default is left out, as Kafka's generated writers leave it
out (some brokers write them all, and librdkafka before 2.2 misreads a section of several tags).
"""

from __future__ import annotations

import struct
from typing import Any, Optional

from kquota.kafka.protocol.schemas import FLEXIBLE_FIRST
from kquota.kafka.protocol.schemas import SCHEMAS as _SCHEMAS

#: message name -> {"api_key", "valid", "flexible", "fields"} (see schemas.py).
SCHEMAS: dict[str, dict[str, Any]] = _SCHEMAS  # type: ignore[assignment]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")
_FIXED = {"int8": _I8, "int16": _I16, "int32": _I32, "int64": _I64, "uint16": _U16, "uint32": _U32,
          "float64": _F64}
_ZERO_UUID = bytes(16)
_NULL = "\x00null"  # a default of null in the schema data


class CodecError(ValueError):
    """A frame that does not decode as the schema says (the connection carrying it is closed)."""


def is_flexible(api_key: int, version: int) -> bool:
    """Whether ``version`` of ``api_key`` uses compact encodings and tagged fields."""
    first = FLEXIBLE_FIRST.get(api_key)
    return first is not None and version >= first


# ------------------------------------------------------------------------------- primitives


def read_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise CodecError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise CodecError("varint too long")


def write_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_fixed(s: struct.Struct, buf: Any, pos: int, what: str) -> Any:
    """The first value of ``s`` at ``pos`` (a field read in place); ``CodecError`` if ``buf``
    ends before it, as every other read of a frame that is cut short."""
    if pos < 0 or pos + s.size > len(buf):
        raise CodecError(f"truncated {what}")
    return s.unpack_from(buf, pos)[0]


def _length(buf: Any, pos: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length prefix: compact (uvarint n+1), int16 (strings) or int32; -1 is null."""
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    s = _I32 if wide else _I16
    if pos + s.size > len(buf):
        raise CodecError("truncated length")
    return s.unpack_from(buf, pos)[0], pos + s.size


def _write_length(out: bytearray, n: int, flexible: bool, wide: bool) -> None:
    if flexible:
        write_uvarint(out, n + 1)
    else:
        out += (_I32 if wide else _I16).pack(n)


def _in(versions: Optional[tuple[int, int]], v: int) -> bool:
    return versions is not None and versions[0] <= v <= versions[1]


# ------------------------------------------------------------------------------- values


def _read_value(t: str, f: tuple, v: int, flex: bool, buf: Any, pos: int) -> tuple[Any, int]:
    fixed = _FIXED.get(t)
    if fixed is not None:
        end = pos + fixed.size
        if end > len(buf):
            raise CodecError(f"truncated {f[0]}")
        return fixed.unpack_from(buf, pos)[0], end
    if t == "string" or t == "bytes" or t == "records":
        n, pos = _length(buf, pos, flex, t != "string")
        if n < 0:
            if not _in(f[4], v):
                raise CodecError(f"null {f[0]} is not allowed")
            return None, pos
        end = pos + n
        if end > len(buf):
            raise CodecError(f"truncated {f[0]}")
        raw = buf[pos:end]
        if t == "string":
            try:
                return bytes(raw).decode("utf-8"), end
            except UnicodeDecodeError:
                raise CodecError(f"{f[0]} is not UTF-8") from None
        return raw, end
    if t == "bool":
        if pos >= len(buf):
            raise CodecError(f"truncated {f[0]}")
        return buf[pos] != 0, pos + 1
    if t == "uuid":
        if pos + 16 > len(buf):
            raise CodecError(f"truncated {f[0]}")
        return bytes(buf[pos:pos + 16]), pos + 16
    if t == "struct":
        if f[1] == "struct" and _in(f[4], v):  # a nullable struct field (not an array's element):
            # Kafka's generated readers take a marker byte first, -1 for null
            if pos >= len(buf):
                raise CodecError(f"truncated {f[0]}")
            if _I8.unpack_from(buf, pos)[0] < 0:
                return None, pos + 1
            pos += 1
        return decode_struct(f[8], v, flex, buf, pos)
    if t == "array":
        n, pos = _length(buf, pos, flex, True)
        if n < 0:
            if not _in(f[4], v):
                raise CodecError(f"null {f[0]} is not allowed")
            return None, pos
        if n > len(buf) - pos:  # each element takes at least one byte: reject absurd counts early
            raise CodecError(f"array {f[0]} claims {n} elements")
        items = []
        elem = f[2]
        for _ in range(n):
            item, pos = _read_value(elem, f, v, flex, buf, pos)
            items.append(item)
        return items, pos
    raise CodecError(f"unknown type {t}")


def _write_value(t: str, f: tuple, v: int, flex: bool, value: Any, out: bytearray) -> None:
    fixed = _FIXED.get(t)
    if fixed is not None:
        out += fixed.pack(value)
    elif t == "string" or t == "bytes" or t == "records":
        if value is None:
            _write_length(out, -1, flex, t != "string")
            return
        data = value.encode("utf-8") if t == "string" else value
        _write_length(out, len(data), flex, t != "string")
        out += data
    elif t == "bool":
        out.append(1 if value else 0)
    elif t == "uuid":
        out += value if value is not None else _ZERO_UUID
    elif t == "struct":
        if f[1] == "struct" and _in(f[4], v):  # a nullable struct field: a marker byte first (-1: null)
            if value is None:
                out += _I8.pack(-1)
                return
            out += _I8.pack(1)
        encode_struct(f[8], v, flex, value if value is not None else {}, out)
    elif t == "array":
        if value is None:
            _write_length(out, -1, flex, True)
            return
        _write_length(out, len(value), flex, True)
        for item in value:
            _write_value(f[2], f, v, flex, item, out)
    else:
        raise CodecError(f"unknown type {t}")


def _default(f: tuple) -> Any:
    t, d = f[1], f[7]
    if d is not None:
        return None if d == _NULL else d
    if t in _FIXED:
        return 0.0 if t == "float64" else 0
    return {"string": "", "bytes": b"", "records": b"", "bool": False, "uuid": _ZERO_UUID,
            "array": [], "struct": {}}.get(t)


# ------------------------------------------------------------------------------- structs


def decode_struct(fields: tuple, v: int, flex: bool, buf: Any, pos: int) -> tuple[dict, int]:
    """Decodes one struct of ``fields`` at version ``v``; returns it and the position after it."""
    obj: dict[str, Any] = {}
    tagged = None
    for f in fields:
        if not _in(f[3], v):
            continue
        if flex and _in(f[6], v):
            if tagged is None:
                tagged = {}
            tagged[f[5]] = f
            continue
        obj[f[0]], pos = _read_value(f[1], f, v, flex, buf, pos)
    if flex:
        pos = _decode_tags(tagged, v, buf, pos, obj)
    return obj, pos


def _decode_tags(tagged: Optional[dict], v: int, buf: Any, pos: int, obj: dict) -> int:
    """Reads a tagged-field section into ``obj`` (known tags by name, others raw in ``_tags``)."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise CodecError("truncated tagged field")
        f = tagged.get(tag) if tagged else None
        if f is None:
            obj.setdefault("_tags", {})[tag] = bytes(buf[pos:end])
        else:
            obj[f[0]], used = _read_value(f[1], f, v, True, buf[:end], pos)
            if used != end:
                raise CodecError(f"tagged field {f[0]} has {end - used} extra bytes")
        pos = end
    return pos


def skip_tagged_fields(buf: Any, pos: int, what: str) -> int:
    """The position after a tagged-field section (count, then tag, size, bytes per field);
    ``CodecError`` naming ``what`` if it runs past the end of ``buf``."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise CodecError(f"truncated {what}")
    return pos


def encode_struct(fields: tuple, v: int, flex: bool, obj: dict, out: bytearray) -> None:
    """Appends ``obj`` encoded as ``fields`` at version ``v``; missing fields take their default."""
    for f in fields:
        if not _in(f[3], v) or (flex and _in(f[6], v)):
            continue
        value = obj[f[0]] if f[0] in obj else _default(f)
        _write_value(f[1], f, v, flex, value, out)
    if flex:
        _encode_tags(fields, v, obj, out, [])


def _encode_tags(fields: tuple, v: int, obj: dict, out: bytearray, tags: list) -> None:
    """Appends the tagged-field section of ``obj`` (known tags present and not at their default,
    then raw ``_tags``)."""
    for f in fields:
        if f[0] in obj and _in(f[3], v) and _in(f[6], v):
            part = bytearray()
            _write_value(f[1], f, v, True, obj[f[0]], part)
            # Kafka's writers test value != default (null, a default struct and all); comparing
            # encodings is that test for every type.
            default = bytearray()
            _write_value(f[1], f, v, True, _default(f), default)
            if part != default:
                tags.append((f[5], bytes(part)))
    tags.extend(obj.get("_tags", {}).items())
    tags.sort()
    write_uvarint(out, len(tags))
    for tag, data in tags:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


def decode_body(name: str, v: int, buf: Any, pos: int) -> dict:
    """Decodes a whole message body (``name`` as in Kafka, e.g. ``"MetadataResponse"``)."""
    spec = SCHEMAS[name]
    flex = _in(spec["flexible"], v)
    if not isinstance(buf, memoryview):
        buf = memoryview(buf)  # records and bytes fields become views, never copies
    obj, end = decode_struct(spec["fields"], v, flex, buf, pos)
    if end != len(buf):
        if spec_is_request(name):
            raise CodecError(f"{name} v{v}: {len(buf) - end} bytes after the body")
        # Some brokers pad responses (librdkafka's mock cluster adds a byte to Metadata v12);
        # clients ignore what follows the body, and re-encoding keeps it.
        obj["_trailing"] = bytes(buf[end:])
    return obj


def spec_is_request(name: str) -> bool:
    return name.endswith("Request")


def encode_body(name: str, v: int, obj: dict, out: Optional[bytearray] = None) -> bytearray:
    """Encodes a message body, appended to ``out`` (a new bytearray if ``None``)."""
    spec = SCHEMAS[name]
    out = bytearray() if out is None else out
    encode_struct(spec["fields"], v, _in(spec["flexible"], v), obj, out)
    out += obj.get("_trailing", b"")
    return out

