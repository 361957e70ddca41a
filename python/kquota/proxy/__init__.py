"""``kquota.proxy``: a Kafka wire-protocol proxy that enforces client quotas as a broker does.

    import asyncio, kquota
    from kquota.proxy import NativeProxyServer

    async def main():
        qm = kquota.QuotaManager()
        qm.alter_client_quotas([({"client-id": "batch"}, {"producer_byte_rate": 1_000_000})])
        async with NativeProxyServer(qm, bootstrap=("127.0.0.1", 9092), listen=("127.0.0.1", 9192)):
            await asyncio.Event().wait()

Modules: ``codec``/``schemas`` (wire format), ``frames`` (headers), ``addresses`` (broker
address rewriting), ``versions`` (ApiVersions clamp), ``connection`` (one client connection),
``handlers`` (the inspected APIs), ``mutations`` (KIP-599), ``admin`` (client-quota admin APIs),
``throttle``, ``sasl``, ``reqlog`` (request log), ``server`` (the asyncio data plane), ``native``
and ``bridge`` (the native data plane, ``kquota._kquota.ProxyDataPlane``, the default), ``planes``
(``serve``: either), ``cli``.
"""

from kquota.proxy.native import NativeProxyServer
from kquota.proxy.reqlog import RequestLog
from kquota.proxy.planes import serve
from kquota.proxy.server import ProxyServer

__all__ = ["NativeProxyServer", "ProxyServer", "RequestLog", "serve"]
