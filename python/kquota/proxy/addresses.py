"""Broker address rewriting: every broker address the cluster returns becomes the proxy's.

Kafka returns broker addresses in Metadata, FindCoordinator, DescribeCluster and (KIP-951) the
``NodeEndpoints`` tagged fields of Produce v10+ and Fetch v16+ responses; missing any of them
lets a client bypass the proxy (grepplabs/kafka-proxy#223, kroxylicious#1028).

A large Fetch response is streamed (cut-through, see :mod:`kquota.proxy.connection`): its size
prefix has gone out before its end — where v16+ keeps NodeEndpoints, in the top-level tagged
fields — arrives. So the tail is rewritten in place, to exactly the old length
(:func:`fit_tagged_section`): the rewritten section is padded with an unknown tag (clients skip
unknown tags), and if the rewrite is longer than the original, NodeEndpoints is dropped (the
client then asks Metadata, through the proxy, for the new leader) — a broker address never
reaches the client.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Callable, Optional

from kquota.proxy import apis
from kquota.proxy.codec import (
    SCHEMAS,
    CodecError,
    decode_body,
    decode_tagged_section,
    encode_body,
    encode_tagged_section,
    section_tags,
    tagged_section_offset,
    write_uvarint,
)
from kquota.proxy.frames import response_frame
from kquota.proxy.streaming import NotYet, StreamedView

#: ``(node id, broker host, broker port) -> (proxy host, proxy port)``; opens the broker's
#: listener on first use.
Resolve = Callable[[int, str, int], Awaitable[tuple[str, int]]]

#: api key -> (response schema, first version with addresses, (list field or None, id field)).
_ADDRESSED = {
    apis.METADATA: ("MetadataResponse", 0, "Brokers", "NodeId"),
    apis.DESCRIBE_CLUSTER: ("DescribeClusterResponse", 0, "Brokers", "BrokerId"),
    apis.PRODUCE: ("ProduceResponse", 10, "NodeEndpoints", "NodeId"),
    apis.FETCH: ("FetchResponse", 16, "NodeEndpoints", "NodeId"),
    apis.FIND_COORDINATOR: ("FindCoordinatorResponse", 0, None, "NodeId"),
}


def has_addresses(api_key: int, version: int) -> bool:
    """Whether responses of this API version may name brokers."""
    spec = _ADDRESSED.get(api_key)
    return spec is not None and version >= spec[1]


async def _patch(node: dict, id_field: str, resolve: Resolve) -> None:
    node_id = node.get(id_field, -1)
    if node_id is None or node_id < 0 or not node.get("Host"):
        return  # "no coordinator" answers carry -1 / "" / -1: nothing to route
    node["Host"], node["Port"] = await resolve(node_id, node["Host"], node["Port"])


async def rewrite_body(api_key: int, version: int, body: dict, resolve: Resolve) -> bool:
    """Rewrites the broker addresses of a decoded response in place; True if any was present."""
    _, _, list_field, id_field = _ADDRESSED[api_key]
    if list_field is not None:
        nodes = body.get(list_field)
        for node in nodes or ():
            await _patch(node, id_field, resolve)
        return bool(nodes)
    if version >= 4:  # FindCoordinator v4+: a list of coordinators (KIP-699)
        for node in body.get("Coordinators") or ():
            await _patch(node, id_field, resolve)
        return True
    await _patch(body, id_field, resolve)
    return True


async def rewrite_addresses(
    frame: bytes, api_key: int, version: int, body_offset: int, resolve: Resolve,
    body: Optional[dict] = None,
) -> Optional[bytes]:
    """The response re-encoded with proxy addresses (prefixed frame), or ``None`` if unchanged."""
    name = _ADDRESSED[api_key][0]
    if body is None:
        body = decode_body(name, version, frame, body_offset)
    if not await rewrite_body(api_key, version, body, resolve):
        return None
    corr = int.from_bytes(frame[:4], "big", signed=True)
    return response_frame(corr, api_key, version, encode_body(name, version, body))


def _uvarint_len(n: int) -> int:
    out = bytearray()
    write_uvarint(out, n)
    return len(out)


def _padded(name: str, version: int, tags: dict, length: int) -> Optional[bytes]:
    """The tagged section of ``tags`` grown to exactly ``length`` bytes by one unknown tag (or
    ``None`` if it cannot be: longer already, or too little room for a tag)."""
    plain = bytes(encode_tagged_section(name, version, tags))
    if len(plain) == length:
        return plain
    if len(plain) > length:
        return None
    known = [f[5] for f in SCHEMAS[name]["fields"] if f[5] is not None]
    present = list(tags.get("_tags", {})) + known
    top = max(present, default=-1) + 1
    # Padding tags of 1, 2 and 3 bytes: sizes and data lengths are encoded minimally, and one of
    # these always fits the spare room exactly (a 1-byte tag cannot fill 129 spare bytes, e.g.).
    for pad in sorted({top, max(top, 128), max(top, 16384)}):
        extra = dict(tags)
        extra["_tags"] = {**tags.get("_tags", {}), pad: b""}
        room = length - len(encode_tagged_section(name, version, extra)) + 1  # size varint + data
        for data_len in (room - 1, room - 2, room - 3):
            if data_len >= 0 and _uvarint_len(data_len) + data_len == room:
                extra["_tags"][pad] = bytes(data_len)
                out = bytes(encode_tagged_section(name, version, extra))
                if len(out) == length:
                    return out
    return None


async def fit_tagged_section(api_key: int, version: int, section: bytes, resolve: Resolve) -> bytes:
    """A response's top-level tagged-field section with NodeEndpoints rewritten to the proxy's
    addresses, of exactly ``len(section)`` bytes (padded with an unknown tag; NodeEndpoints
    dropped if the rewrite does not fit). Bytes after the section (broker padding) are kept."""
    name = _ADDRESSED[api_key][0]
    tags, end = decode_tagged_section(name, version, section, 0)
    if "NodeEndpoints" not in tags:
        return section
    length = end
    await rewrite_body(api_key, version, tags, resolve)
    out = _padded(name, version, tags, length)
    if out is None:
        del tags["NodeEndpoints"]
        out = _padded(name, version, tags, length)
        if out is None:
            raise CodecError(f"{name} v{version}: cannot fit the rewritten tagged fields")
    return out + section[end:]


class StreamedTail:
    """Finds and rewrites the NodeEndpoints of a response streamed in chunks: ``feed`` each chunk
    as it passes (the first holding the header), then ``finish`` with the held tail — the
    response's last bytes, from ``held_from`` — for the tail to send instead, of the same length
    with NodeEndpoints fitted as :func:`fit_tagged_section`.

    The tagged-field section is found by walking the chunks as they pass
    (:class:`kquota.proxy.streaming.StreamedView`: nothing but the bytes read is kept), so a
    response of any size costs a few bytes per partition. ``finish`` raises ``CodecError`` if
    NodeEndpoints began before the held tail: the connection is closed rather than an address
    leaked."""

    def __init__(self, api_key: int, version: int, body_offset: int, size: int, resolve: Resolve) -> None:
        self._api_key = api_key
        self._version = version
        self._name = _ADDRESSED[api_key][0]
        self._body_offset = body_offset
        self._resolve = resolve
        self._view = StreamedView(size)
        #: (where the section starts, its tags), once the walk has reached them.
        self._found: Optional[tuple[int, list[int]]] = None

    def feed(self, chunk: bytes) -> None:
        self._view.add(chunk)
        if self._found is None:
            try:
                start = tagged_section_offset(self._name, self._version, self._view, self._body_offset)
                self._found = start, section_tags(self._view, start)
            except NotYet:
                pass

    async def finish(self, tail: bytes, held_from: int) -> bytes:
        self.feed(tail)
        if self._found is None:
            raise CodecError(f"{self._name} v{self._version}: no tagged fields at the end")
        start, tags = self._found
        if start < held_from:
            if NODE_ENDPOINTS in tags:
                raise CodecError(f"{self._name} v{self._version}: NodeEndpoints longer than the held tail")
            return tail
        cut = start - held_from
        return tail[:cut] + await fit_tagged_section(self._api_key, self._version, tail[cut:], self._resolve)


#: The tag of NodeEndpoints in Produce v10+ / Fetch v16+ responses.
NODE_ENDPOINTS = 0
