"""kquota.aio over real loopback sockets: muting stops reads, the delay queue, cancellation."""

from __future__ import annotations

import asyncio

import pytest

import kquota
from kquota import ClientQuotaType as Q
from kquota.aio import DelayQueue, ThrottledConnection, loop_now_ms
from waiting import wait_until_async


def run(coro):
    return asyncio.run(coro)


async def pair(qm, user="u", client_id="c"):
    """A connected (server ThrottledConnection, client reader, client writer, server)."""
    accepted: asyncio.Future = asyncio.get_running_loop().create_future()

    async def on_connect(reader, writer):
        accepted.set_result((reader, writer))
        await asyncio.Event().wait()  # the connection stays open until the server is closed

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    c_reader, c_writer = await asyncio.open_connection("127.0.0.1", port)
    s_reader, s_writer = await accepted
    return ThrottledConnection(qm, s_reader, s_writer, user, client_id), c_reader, c_writer, server


def manager():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    qm.alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1000})])
    return qm


def test_muting_stops_reads_and_the_peer_backs_up():
    async def scenario():
        qm = manager()
        conn, _c_reader, c_writer, server = await pair(qm)
        c_writer.write(b"a" * 100)
        assert await conn.readexactly(100) == b"a" * 100
        ms = conn.record(Q.PRODUCE, 50_000)
        assert ms > 0
        conn.throttle(Q.PRODUCE, 400)
        assert conn.muted and qm.delay_queue(Q.PRODUCE).queue_size == 1
        buffered = len(conn.reader._buffer)  # bytes the stream already held (none)
        # The peer keeps writing far more than the socket buffers hold.
        chunk = b"b" * 65536
        for _ in range(256):  # 16 MiB
            c_writer.write(chunk)
        pending_read = asyncio.ensure_future(conn.read(10))
        await asyncio.sleep(0.25)
        # Nothing was read from the socket during the mute, the read waits, and the peer's
        # writes backed up in its own transport.
        assert len(conn.reader._buffer) == buffered
        assert not pending_read.done()
        assert c_writer.transport.get_write_buffer_size() > 0
        # After the throttle the connection reads again and everything arrives.
        got = await asyncio.wait_for(pending_read, 10)
        assert got == b"b" * 10
        assert not conn.muted and qm.delay_queue(Q.PRODUCE).queue_size == 0
        rest = 256 * 65536 - 10
        received = 0
        while received < rest:
            received += len(await asyncio.wait_for(conn.read(1 << 20), 10))
        assert received == rest
        conn.close()
        c_writer.close()
        server.close()
        qm.close()

    run(scenario())


def test_unmuted_connection_reads_normally():
    async def scenario():
        qm = manager()
        conn, _r, c_writer, server = await pair(qm)
        conn.throttle(Q.PRODUCE, 0)  # no throttle, no mute
        assert not conn.muted and qm.delay_queue(Q.PRODUCE).queue_size == 0
        c_writer.write(b"line\n")
        assert await asyncio.wait_for(conn.readline(), 5) == b"line\n"
        conn.close()
        c_writer.close()
        server.close()
        qm.close()

    run(scenario())


def test_a_longer_throttle_extends_the_mute_and_a_shorter_one_does_not():
    async def scenario():
        qm = manager()
        conn, _r, c_writer, server = await pair(qm)
        conn.throttle(Q.PRODUCE, 200)
        first = conn._entry
        conn.throttle(Q.PRODUCE, 50)
        assert conn._entry is first
        conn.throttle(Q.PRODUCE, 5000)
        assert conn._entry is not first and not first.pending
        assert qm.delay_queue(Q.PRODUCE).queue_size == 1
        conn.close()
        assert qm.delay_queue(Q.PRODUCE).queue_size == 0
        c_writer.close()
        server.close()
        qm.close()

    run(scenario())


def test_cancelling_a_muted_reader_is_safe():
    async def scenario():
        qm = manager()
        conn, _r, c_writer, server = await pair(qm)

        async def handler():
            async with conn:
                conn.throttle(Q.PRODUCE, 60_000)
                await conn.readexactly(4)

        task = asyncio.ensure_future(handler())

        async def queued() -> bool:
            await asyncio.sleep(0)  # the handler runs up to its mute
            return qm.delay_queue(Q.PRODUCE).queue_size == 1

        assert await wait_until_async(queued, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The connection left the delay queue and was closed; the queue's timer is gone.
        assert qm.delay_queue(Q.PRODUCE).queue_size == 0
        assert conn.writer.transport.is_closing()
        c_writer.close()
        server.close()
        qm.close()

    run(scenario())


def test_delay_queue_counts_and_fires():
    async def scenario():
        q = DelayQueue(Q.FETCH)
        fired = []
        a = q.add(20, lambda: fired.append("a"))
        q.add(10, lambda: fired.append("b"))
        c = q.add(30, lambda: fired.append("c"))
        assert q.queue_size == 3
        assert c.cancel() and not c.cancel()
        assert q.queue_size == 2
        await asyncio.sleep(0.2)
        assert fired == ["b", "a"]
        assert q.queue_size == 0 and not a.pending
        with pytest.raises(ValueError):
            q.add(-1, lambda: None)
        with pytest.raises(TypeError):  # a bool is not a number
            q.add(True, lambda: None)
        with pytest.raises(kquota.QuotaValueError):
            q.add(2**31, lambda: None)

    run(scenario())


def test_throttles_feed_the_throttle_time_metric_and_queue_size():
    async def scenario():
        qm = manager()
        conn, _r, c_writer, server = await pair(qm)
        now = loop_now_ms()
        conn.throttle(Q.PRODUCE, 300)
        conn.close()
        conn2, _r2, c_writer2, server2 = await pair(qm, "v", "d")
        conn2.throttle(Q.PRODUCE, 100)
        metrics = {(m.group, m.name): m.value for m in qm.metrics(now_ms=now) if not m.tags}
        assert metrics[("Produce", "throttle-time")] == 200.0
        assert metrics[("Produce", "queue-size")] == 1.0
        conn2.close()
        for w in (c_writer, c_writer2):
            w.close()
        server.close()
        server2.close()
        qm.close()

    run(scenario())


def test_bad_arguments():
    async def scenario():
        qm = manager()
        conn, _r, c_writer, server = await pair(qm)
        with pytest.raises(ValueError):
            conn.throttle(Q.PRODUCE, -5)
        with pytest.raises(TypeError):
            conn.throttle(Q.PRODUCE, 1.5)
        with pytest.raises(TypeError):
            conn.throttle(Q.PRODUCE, True)
        with pytest.raises(kquota.QuotaValueError):
            conn.throttle(Q.PRODUCE, 10**400)
        with pytest.raises(ValueError):
            conn.throttle("nope", 5)
        conn.close()
        c_writer.close()
        server.close()
        qm.close()

    run(scenario())
