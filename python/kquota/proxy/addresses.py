"""Broker address rewriting: every broker address the cluster returns becomes the proxy's.

Kafka returns broker addresses in Metadata, FindCoordinator, DescribeCluster and (KIP-951) the
``NodeEndpoints`` tagged fields of Produce v10+ and Fetch v16+ responses; missing any of them
lets a client bypass the proxy (grepplabs/kafka-proxy#223, kroxylicious#1028).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Callable, Optional

from kquota.proxy import apis
from kquota.proxy.codec import decode_body, encode_body
from kquota.proxy.frames import response_frame

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
