"""``kquota.proxy``: a Kafka wire-protocol proxy that enforces client quotas as a broker does.

    import asyncio, kquota
    from kquota.proxy import NativeProxyServer

    async def main():
        qm = kquota.QuotaManager()
        qm.alter_client_quotas([({"client-id": "batch"}, {"producer_byte_rate": 1_000_000})])
        async with NativeProxyServer(qm, bootstrap=("127.0.0.1", 9092), listen=("127.0.0.1", 9192)):
            await asyncio.Event().wait()

Modules: ``protocol`` (Kafka's wire protocol: codec and schemas, frames, apis, the
ApiVersions clamp, broker address rewriting, the ``ThrottleTimeMs`` field), ``request`` (the
request contract handlers work to), ``settings`` (options),
``handlers`` (the inspected APIs), ``dispatch`` (API -> handler), ``mutations`` (KIP-599),
``admin`` (client-quota admin APIs), ``sasl``, ``reqlog`` (request log), ``native`` and
``bridge`` (the data plane, ``kquota._kquota.ProxyDataPlane``, Rust on tokio; ``serve``),
``cli``.
"""

from kquota.proxy.native import NativeProxyServer, serve
from kquota.proxy.reqlog import RequestLogWriter

__all__ = ["NativeProxyServer", "RequestLogWriter", "serve"]
