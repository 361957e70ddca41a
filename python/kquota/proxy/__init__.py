"""``kquota.proxy``: a Kafka wire-protocol proxy that enforces client quotas as a broker does.

    import asyncio, kquota
    from kquota.proxy import ProxyServer

    async def main():
        qm = kquota.QuotaManager()
        qm.alter_client_quotas([({"client-id": "batch"}, {"producer_byte_rate": 1_000_000})])
        async with ProxyServer(qm, bootstrap=("127.0.0.1", 9092), listen=("127.0.0.1", 9192)):
            await asyncio.Event().wait()

Modules: ``codec``/``schemas`` (wire format), ``frames`` (headers), ``addresses`` (broker
address rewriting), ``versions`` (ApiVersions clamp), ``connection`` (one client connection),
``handlers`` (the inspected APIs), ``mutations`` (KIP-599), ``admin`` (client-quota admin APIs),
``throttle``, ``sasl``, ``reqlog`` (request log), ``server``, ``cli``.
"""

from kquota.proxy.reqlog import RequestLog
from kquota.proxy.server import ProxyServer, serve

__all__ = ["ProxyServer", "RequestLog", "serve"]
