"""The processes of the proxy benchmark (benches/bench_proxy.py): the relays whose CPU time it
reads (a kquota proxy, an unparsing asyncio byte pump) and librdkafka's mock cluster in a
process of its own; and the many-connections client of the connection row."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

from proxy_support import Tansu
from waiting import free_port, wait_port

HERE = os.path.dirname(os.path.abspath(__file__))
CLK = os.sysconf("SC_CLK_TCK")


PUMP = r"""
import asyncio, sys
async def pipe(r, w):
    try:
        while True:
            data = await r.read(262144)
            if not data:
                break
            w.write(data)
            await w.drain()
    finally:
        w.close()
async def handle(r, w):
    ur, uw = await asyncio.open_connection("127.0.0.1", int(sys.argv[2]))
    await asyncio.gather(pipe(r, uw), pipe(ur, w), return_exceptions=True)
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    await server.serve_forever()
try:
    import uvloop
    uvloop.run(main())
except ImportError:
    asyncio.run(main())
"""


class Relay:
    """A relay process in front of a broker: its address and its CPU and memory, read from /proc."""

    proc: subprocess.Popen
    port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> int:
        self.proc.terminate()
        self.proc.wait(30)
        return self.proc.returncode


class BytePump(Relay):
    """The floor of any proxy: bytes relayed unparsed, to a broker that advertises the pump's port
    (so a client reaches that broker only through the pump; a client bootstrapping at the broker
    itself would be sent to the pump too)."""

    def __init__(self, port: int, broker: Tansu) -> None:
        self.port = port
        self.proc = subprocess.Popen([sys.executable, "-c", PUMP, str(port), str(broker.port)])
        wait_port(port, 30)


MOCK = r"""
import sys
sys.path.insert(0, sys.argv[1])
from proxy_support import MockCluster
cluster = MockCluster(1)
print(cluster.address, flush=True)
sys.stdin.read()  # serves until the bench closes stdin
"""


class MockBroker:
    """librdkafka's mock cluster, one broker, in a process of its own (as tansu is).

    The latency rows' second broker: tansu pauses for 10-20 ms every few seconds (a probe process
    sleeping 0.5 ms sees no gap meanwhile, and the same client against this broker sees no such
    delays), which puts its 10k msg/s p99 rows' resolution above the 1 ms target."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", MOCK, os.path.join(os.path.dirname(HERE), "tests", "support")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.address = self.proc.stdout.readline().strip()
        if not self.address:
            raise RuntimeError(f"the mock cluster did not start (exit {self.proc.wait(10)})")

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ProxyProcess(Relay):
    """``kquota proxy`` in its own process (so its CPU can be read)."""

    def __init__(self, broker: Tansu, store_dir: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", broker.address,
             "--listen", f"127.0.0.1:{self.port}", "--store", f"sqlite:///{store_dir}/q.db",
             "--log-level", "WARNING", "--event-loop", os.environ.get("KQ_PROXY_LOOP", "auto")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_port(self.port, 30)


async def many_connections(port: int, count: int) -> dict:
    """``count`` connections open at once, each sending Metadata v1; all must be answered."""
    import struct

    body = struct.pack(">i", -1)
    head = struct.pack(">hhih", 3, 1, 1, 5) + b"bench"
    frame = struct.pack(">i", len(head) + len(body)) + head + body
    conns = []
    t0 = time.perf_counter()
    for _ in range(count):
        conns.append(await asyncio.open_connection("127.0.0.1", port))
    opened = time.perf_counter() - t0

    async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(frame)
        await writer.drain()
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        data = await reader.readexactly(size)
        return struct.unpack_from(">i", data)[0] == 1

    t1 = time.perf_counter()
    results = await asyncio.gather(*(ask(r, w) for r, w in conns), return_exceptions=True)
    answered = time.perf_counter() - t1
    for _, w in conns:
        w.close()
    ok = sum(1 for r in results if r is True)
    return {"connections": count, "answered": ok, "open_s": opened, "all_answered_s": answered}
