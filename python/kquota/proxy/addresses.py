"""Broker address rewriting: every broker address the cluster returns becomes the proxy's.

Kafka returns broker addresses in Metadata, FindCoordinator, DescribeCluster and (KIP-951) the
``NodeEndpoints`` tagged fields of Produce v10+ and Fetch v16+ responses; missing any of them
lets a client bypass the proxy (grepplabs/kafka-proxy#223, kroxylicious#1028).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Callable

from kquota.kafka.protocol import apis

#: ``(node id, broker host, broker port) -> (proxy host, proxy port)``; opens the broker's
#: listener on first use.
Resolve = Callable[[int, str, int], Awaitable[tuple[str, int]]]

#: api key -> (list field or None, id field) of the responses the Python handlers rewrite
#: (Produce's and Fetch's NodeEndpoints are rewritten by the native data plane).
_ADDRESSED = {
    apis.METADATA: ("Brokers", "NodeId"),
    apis.DESCRIBE_CLUSTER: ("Brokers", "BrokerId"),
    apis.FIND_COORDINATOR: (None, "NodeId"),
}


async def _patch(node: dict, id_field: str, resolve: Resolve) -> None:
    node_id = node.get(id_field, -1)
    if node_id is None or node_id < 0 or not node.get("Host"):
        return  # "no coordinator" answers carry -1 / "" / -1: nothing to route
    node["Host"], node["Port"] = await resolve(node_id, node["Host"], node["Port"])


async def rewrite_body(api_key: int, version: int, body: dict, resolve: Resolve) -> bool:
    """Rewrites the broker addresses of a decoded response in place; True if any was present."""
    list_field, id_field = _ADDRESSED[api_key]
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

