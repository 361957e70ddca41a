"""``kquota.proxy``: a Kafka wire-protocol proxy that enforces client quotas as a broker does.

    import asyncio, kquota
    from kquota.proxy import ProxyServer

    async def main():
        qm = kquota.QuotaManager()
        qm.alter_client_quotas([({"client-id": "batch"}, {"producer_byte_rate": 1_000_000})])
        async with ProxyServer(qm, bootstrap=("127.0.0.1", 9092), listen=("127.0.0.1", 9192)):
            await asyncio.Event().wait()

Modules: ``request`` (the request contract handlers work to), ``settings`` (options),
``handlers`` (the inspected APIs), ``dispatch`` (API -> handler), ``api_versions`` (the
ApiVersions clamp), ``addresses`` (broker addresses rewritten to the proxy's),
``mutations`` (KIP-599), ``admin`` (client-quota admin APIs), ``tls_settings``, ``sasl``,
``request_log_writer`` (the request log's Parquet writer), ``shadow`` (``--shadow-store``'s
predictions and metrics), ``fleet`` with ``fleet_members``,
``fleet_shares`` and ``fleet_usage`` (``--quota-scope fleet``; ``fleet_usage``: the usage
records' codec), ``server`` and ``bridge`` (``ProxyServer`` over the data plane,
``kquota._kquota.ProxyDataPlane``, Rust on tokio; ``serve``), ``cli``. Kafka's wire protocol,
Java properties and client security, which the configs command and the stores share, are
:mod:`kquota.kafka`'s.

The names below are imported on first use, so that importing ``kquota.proxy.cli`` (the
``kquota`` command's parser) loads no data plane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kquota.proxy.server import ProxyServer, serve
    from kquota.proxy.request_log_writer import RequestLogWriter
    from kquota.proxy.shadow import ShadowPrediction

__all__ = ["ProxyServer", "RequestLogWriter", "ShadowPrediction", "serve"]

_HOMES = {"ProxyServer": "kquota.proxy.server", "serve": "kquota.proxy.server",
          "RequestLogWriter": "kquota.proxy.request_log_writer", "ShadowPrediction": "kquota.proxy.shadow"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'kquota.proxy' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
