"""A small asyncio TCP "broker" using kquota's embedding kit end to end.

Protocol (length-prefixed frames, big-endian):

* the client's first frame is ``user\\nclient-id`` (UTF-8);
* every following frame is a produce request whose payload size is recorded against the
  PRODUCE quota; the server answers each one at once with a 4-byte ``throttle_time_ms`` and, if
  that is > 0, mutes the connection for that long (KIP-219): it reads nothing more from it, so a
  client that ignores the throttle is held to its quota by TCP back-pressure.

Metrics are served for Prometheus at ``http://<host>:<metrics-port>/metrics``.

Run it, and a client producing at twice its quota::

    python examples/throttled_server.py --port 9999 --metrics-port 9308 --quota 100000 &
    python examples/throttled_server.py --client --port 9999 --rate 200000 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import time
from typing import Optional

import kquota
from kquota import ClientQuotaType
from kquota.aio import ThrottledConnection, loop_now_ms

HEADER = struct.Struct(">I")
THROTTLE = struct.Struct(">i")
MAX_FRAME = 16 * 1024 * 1024


async def read_frame(reader) -> bytes:
    """One length-prefixed frame from a ``StreamReader`` or a ``ThrottledConnection``."""
    (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes is too large")
    return await reader.readexactly(size)


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


class ThrottledServer:
    """Accepts connections, records each produce request on the connection's quota handle,
    answers with the throttle and mutes throttled connections.

    ``accepted`` lists ``(now_ms, bytes)`` of every request the server has read and recorded,
    for the demo's report and for tests.
    """

    def __init__(self, qm: kquota.QuotaManager, quota_type: ClientQuotaType = ClientQuotaType.PRODUCE) -> None:
        self.qm = qm
        self.quota_type = quota_type
        self.accepted: list[tuple[int, int]] = []
        self.connections = 0
        self._tasks: set[asyncio.Task] = set()
        self._conns: set[ThrottledConnection] = set()
        self._server: Optional[asyncio.Server] = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            user, _, client_id = (await read_frame(reader)).decode("utf-8", "replace").partition("\n")
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            writer.close()
            return
        self.connections += 1
        task = asyncio.current_task()
        conn = ThrottledConnection(self.qm, reader, writer, user, client_id)
        self._tasks.add(task)
        self._conns.add(conn)
        try:
            async with conn:
                while True:
                    try:
                        payload = await read_frame(conn)
                    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
                        break
                    throttle_ms = conn.record(self.quota_type, len(payload))
                    self.accepted.append((conn.now_ms(), len(payload)))
                    writer.write(THROTTLE.pack(throttle_ms))  # the response goes out at once
                    conn.throttle(self.quota_type, throttle_ms)  # then the channel is muted
        finally:
            self._conns.discard(conn)
            self._tasks.discard(task)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
        self._server = await asyncio.start_server(self.handle, host, port)
        return self._server

    async def aclose(self) -> None:
        """Stops accepting and closes every connection (muted ones leave the delay queue)."""
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.close()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)


async def greedy_client(
    host: str,
    port: int,
    user: str,
    client_id: str,
    rate: float,
    seconds: float,
    frame_size: int = 10_000,
) -> list[int]:
    """Produces ``frame_size``-byte requests at ``rate`` B/s for ``seconds`` (loop clock),
    ignoring the throttles it is sent (it only reads them); returns them."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(frame(f"{user}\n{client_id}".encode()))
    throttles: list[int] = []

    async def responses() -> None:
        try:
            while True:
                (ms,) = THROTTLE.unpack(await reader.readexactly(THROTTLE.size))
                throttles.append(ms)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    reading = asyncio.create_task(responses())
    loop = asyncio.get_running_loop()
    payload = frame(b"x" * frame_size)
    interval = frame_size / rate
    start = loop.time()
    sent = 0
    while loop.time() - start < seconds:
        writer.write(payload)
        await writer.drain()  # blocks once the muted server lets the socket buffers fill
        sent += 1
        delay = start + sent * interval - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
    writer.close()
    reading.cancel()
    try:
        await writer.wait_closed()
    except (ConnectionError, OSError):
        pass
    return throttles


def accepted_rate(accepted: list[tuple[int, int]], start_ms: int, end_ms: int) -> float:
    """Bytes per second the server accepted in ``[start_ms, end_ms)``."""
    total = sum(b for t, b in accepted if start_ms <= t < end_ms)
    return total / ((end_ms - start_ms) / 1000.0)


async def serve(port: int, metrics_port: Optional[int], quota: int) -> None:
    import kquota.prometheus

    qm = kquota.QuotaManager()
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": quota})])
    if metrics_port is not None:
        kquota.prometheus.start_http_server(qm, metrics_port, addr="127.0.0.1")
        print(f"metrics at http://127.0.0.1:{metrics_port}/metrics")
    server = ThrottledServer(qm)
    srv = await server.start("127.0.0.1", port)
    print(f"listening on {srv.sockets[0].getsockname()}, clients/<default> = {quota} B/s")
    last = loop_now_ms()
    async with srv:
        while True:
            await asyncio.sleep(5)
            now = loop_now_ms()
            print(f"accepted {accepted_rate(server.accepted, last, now):,.0f} B/s over the last 5 s")
            last = now


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=9999)
    p.add_argument("--metrics-port", type=int, default=9308)
    p.add_argument("--quota", type=int, default=100_000, help="clients/<default> producer_byte_rate")
    p.add_argument("--client", action="store_true", help="run a greedy client instead")
    p.add_argument("--rate", type=float, default=200_000.0)
    p.add_argument("--seconds", type=float, default=30.0)
    args = p.parse_args(argv)
    if args.client:
        t0 = time.monotonic()
        throttles = asyncio.run(greedy_client("127.0.0.1", args.port, "", "greedy", args.rate, args.seconds))
        print(f"{len(throttles)} responses in {time.monotonic() - t0:.1f} s, {sum(1 for t in throttles if t)} throttled")
    else:
        asyncio.run(serve(args.port, args.metrics_port, args.quota))


if __name__ == "__main__":
    main()
