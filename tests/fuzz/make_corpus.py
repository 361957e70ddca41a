"""Writes the fuzz targets' seed corpora (committed; run again after a schema change):
``rust/kquota-proxy/fuzz/corpus/<target>/`` for the cargo-fuzz targets and
``tests/fuzz/corpus/<target>/`` for the atheris ones. Each seed is a valid input of its kind:
every message the schema data knows at every version, each field given a value (one element
per array, tagged fields present), framed as the proxy reads it; Produce and Fetch naming the
own_topics target's topics; PROXY v1/v2 headers of each
family; SASL first tokens of each mechanism. File names are the content's SHA-1, as libFuzzer
names what it keeps. ``python tests/fuzz/make_corpus.py``
"""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import struct

import fuzz_codec
import fuzz_sasl

from kquota.kafka.protocol.codec import SCHEMAS, encode_body, is_flexible

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUST = ROOT / "rust" / "kquota-proxy" / "fuzz" / "corpus"
PYTHON = ROOT / "tests" / "fuzz" / "corpus"


def _in(versions, v: int) -> bool:
    return versions is not None and versions[0] <= v <= versions[1]


def _value(t: str, f: tuple, v: int):
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return 1
    return {"float64": 1.5, "string": "a", "bytes": b"\x01\x02", "records": b"\x00" * 12, "bool": True,
            "uuid": bytes(range(16))}.get(t) if t not in ("struct", "array") else (
        example(f[8], v) if t == "struct" else [_value(f[2], f, v)])


def example(fields: tuple, v: int) -> dict:
    """A body with every field of version ``v`` set (arrays of one element)."""
    return {f[0]: _value(f[1], f, v) for f in fields if _in(f[3], v)}


def _request_frame(key: int, version: int, body: bytes, corr: int = 7, client: bytes = b"fuzz") -> bytes:
    header = struct.pack(">hhih", key, version, corr, len(client)) + client
    if is_flexible(key, version):
        header += b"\x00"
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


def _response(name: str, v: int, flexible_header: bool) -> bytes:
    body = bytes(encode_body(name, v, example(SCHEMAS[name]["fields"], v)))
    return struct.pack(">i", 7) + (b"\x00" if flexible_header else b"") + body


def _write(directory: pathlib.Path, seeds: list[bytes]) -> None:
    """The seeds, replacing the earlier ones; the ``crash-*`` inputs fuzzing found stay (every
    run replays them)."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        if not old.name.startswith("crash-"):
            old.unlink()
    for data in seeds:
        (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)


def request_reader() -> list[bytes]:
    seeds = []
    for name, versions in (("ProduceRequest", range(3, 12)), ("FetchRequest", range(4, 18)),
                           ("MetadataRequest", (0, 9, 12)), ("ApiVersionsRequest", (0, 3, 4)),
                           ("SaslHandshakeRequest", (1,)), ("SaslAuthenticateRequest", (0, 2))):
        key = SCHEMAS[name]["api_key"]
        for v in versions:
            seeds.append(_request_frame(key, v, bytes(encode_body(name, v, example(SCHEMAS[name]["fields"], v)))))
    seeds.append(seeds[0] + seeds[-1])  # two frames on one connection
    return seeds


def own_topics() -> list[bytes]:
    """Produce and Fetch requests (no size prefix: the target takes one frame) at every version
    the proxy parses: their strings are ``a`` and their ids 00..0f, the target's own topics; then
    with a topic that is not one (``b``, id 10..1f) listed first and one with no partition; then
    naming ``b`` alone."""
    seeds = []
    for name, versions in (("ProduceRequest", range(3, 12)), ("FetchRequest", range(4, 18))):
        spec = SCHEMAS[name]
        key = spec["api_key"]
        for v in versions:
            body = example(spec["fields"], v)
            seeds.append(_request_frame(key, v, bytes(encode_body(name, v, body)))[4:])
            topics = "TopicData" if key == 0 else "Topics"
            own = body[topics][0]
            other = dict(own, **{"Name": "b", "Topic": "b", "TopicId": bytes(range(16, 32))})
            other = {k: other[k] for k in own}
            empty = dict(own, **{"PartitionData" if key == 0 else "Partitions": []})
            for listed in ([other, own, empty], [other]):
                seeds.append(_request_frame(key, v, bytes(encode_body(name, v, dict(body, **{topics: listed}))))[4:])
    return seeds


def produce_response() -> list[bytes]:
    return [bytes([v - 3]) + _response("ProduceResponse", v, v >= 9) for v in range(3, 12)]


def fetch_response() -> list[bytes]:
    return [bytes([v - 12]) + _response("FetchResponse", v, True) for v in range(12, 18)]


def proxy_header() -> list[bytes]:
    sig = b"\r\n\r\n\x00\r\nQUIT\n"
    inet = bytes([192, 0, 2, 1, 198, 51, 100, 7]) + struct.pack(">HH", 51000, 9092)
    inet6 = bytes(range(32)) + struct.pack(">HH", 51000, 9092)
    tlv = b"\x04" + struct.pack(">H", 3) + b"abc"
    return [
        b"PROXY TCP4 192.0.2.1 198.51.100.7 51000 9092\r\n\x00\x00\x00\x10",
        b"PROXY TCP6 2001:db8::1 2001:db8::2 51000 9092\r\n",
        b"PROXY UNKNOWN\r\n", b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n",
        sig + b"\x21\x11" + struct.pack(">H", len(inet)) + inet,
        sig + b"\x21\x11" + struct.pack(">H", len(inet) + len(tlv)) + inet + tlv,
        sig + b"\x21\x21" + struct.pack(">H", len(inet6)) + inet6,
        sig + b"\x20\x00" + struct.pack(">H", 0),
        sig + b"\x21\x31" + struct.pack(">H", 216) + b"/tmp/socket".ljust(216, b"\x00"),
    ]


def codec() -> list[bytes]:
    seeds = []
    for name, spec in sorted(SCHEMAS.items()):
        lo, hi = spec["valid"]
        for v in range(lo, hi + 1):
            seeds.append(fuzz_codec.seed(name, v, bytes(encode_body(name, v, {}))))
            seeds.append(fuzz_codec.seed(name, v, bytes(encode_body(name, v, example(spec["fields"], v)))))
    return seeds


def _jwt(claims: dict) -> bytes:
    def part(obj) -> bytes:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=")

    return part({"alg": "none"}) + b"." + part(claims) + b"."


def sasl() -> list[bytes]:
    return [
        fuzz_sasl.seed("PLAIN", b"\x00alice\x00alice-secret"),
        fuzz_sasl.seed("PLAIN", b"admin\x00alice\x00alice-secret"),
        fuzz_sasl.seed("SCRAM-SHA-256", b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL"),
        fuzz_sasl.seed("SCRAM-SHA-512", b"n,a=admin,n=al=2Cice=3D,r=x,tokenauth=true"),
        fuzz_sasl.seed("OAUTHBEARER", b"n,,\x01auth=Bearer " + _jwt({"sub": "alice", "exp": 1}) + b"\x01\x01"),
        fuzz_sasl.seed("OAUTHBEARER", b"n,a=alice,\x01host=h\x01auth=Bearer " + _jwt({"sub": ["x"]}) + b"\x01\x01"),
        fuzz_sasl.seed("GSSAPI", b"\x60\x82\x01\x00"),
        fuzz_sasl.seed(None, b""),
    ]


def main() -> None:
    for target in (request_reader, own_topics, produce_response, fetch_response, proxy_header):
        _write(RUST / target.__name__, target())
    for target in (codec, sasl):
        _write(PYTHON / target.__name__, target())


if __name__ == "__main__":
    main()
