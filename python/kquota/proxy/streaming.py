"""Cut-through: large frames are relayed as they arrive instead of stored first.

Storing a whole frame before forwarding it serialises the two transfers (broker -> proxy, then
proxy -> client): a 6 MB Fetch response costs twice its transfer time. A frame of at least
``STREAM_MIN`` bytes whose API allows it is therefore streamed (:mod:`kquota.proxy.connection`
decides where): only its head (``HEAD`` bytes: header, and what the quota needs) is read before
deciding, then the rest is pumped chunk by chunk with back-pressure (``drain``), so memory per
frame stays bounded by the chunk size, not the frame size.

- Produce requests (librdkafka sends batches up to ~1 MB): the head holds the header, the
  transactional id and acks; the recorded size is still the whole request's (header + body).
- Fetch responses: the quota is decided from the size prefix and the head (throttle patched
  into ``ThrottleTimeMs``, the body's first field); a response Kafka would answer empty and
  throttled has its rest discarded. Fetch v16+ may end with NodeEndpoints (top-level tag 0):
  the last ``TAIL_HOLD`` bytes are held back; the codec's own skip logic walks the chunks as
  they pass (:class:`StreamedView`: only the few bytes the walk reads — counts, lengths — are
  remembered, not the chunks) to find the top-level tagged-field section, which is rewritten to
  exactly its old length (:class:`kquota.proxy.addresses.StreamedTail`). If NodeEndpoints
  begins before the held tail, the connection is closed rather than an address leaked.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional

#: Frames at least this long are streamed (cut-through) when their API allows it.
STREAM_MIN = 65536
#: The head of a streamed frame read before deciding (longer headers fall back to whole frames).
HEAD = 8192
#: The end of a streamed Fetch v16+ response held back to rewrite NodeEndpoints in place.
TAIL_HOLD = 65536
#: Bytes relayed per write while streaming (the stream readers' limit lets this much buffer).
CHUNK = 1 << 20

#: A streamed response's plan: (prefixed head to send — or the whole answer if ``replace``;
#: throttle; replace; the held tail's rewriter — ``feed(chunk)`` for each chunk passing,
#: ``await finish(tail, held_from)`` for the tail to send — or ``None``).
StreamPlan = tuple[bytes, int, bool, Optional[Any]]


class NotYet(Exception):
    """A walk over a :class:`StreamedView` reached bytes that have not arrived."""


class StreamedView:
    """A frame of ``size`` bytes arriving in chunks, for the codec's forward walks: ``len`` and
    integer indexing. A walk is rerun from the start as each chunk arrives (:class:`NotYet` when
    it runs ahead of the data); every byte it read is remembered, so the chunks themselves are
    let go — a walk reads the same positions each time, in increasing order."""

    __slots__ = ("_base", "_chunk", "_known", "_size")

    def __init__(self, size: int) -> None:
        self._size = size
        self._known: dict[int, int] = {}
        self._chunk = b""
        self._base = 0

    def add(self, chunk: bytes) -> None:
        """The next chunk (the previous one is released)."""
        self._base += len(self._chunk)
        self._chunk = chunk

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, i: int) -> int:
        value = self._known.get(i)
        if value is None:
            j = i - self._base
            if j >= len(self._chunk):
                raise NotYet(i)
            if j < 0:
                raise IndexError(f"byte {i} has passed unread")
            value = self._known[i] = self._chunk[j]
        return value


def send(writer: asyncio.StreamWriter, *data: bytes) -> None:
    """Writes ``data`` in one send; ``ConnectionError`` if the peer has gone (uvloop raises
    ``RuntimeError`` for a write to a closed transport, the standard loop drops it silently)."""
    if writer.is_closing():
        raise ConnectionError("the peer closed the connection")
    if len(data) == 1:
        writer.write(data[0])
    else:
        writer.writelines(data)


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int,
               on_chunk: Optional[Callable[[bytes], None]] = None, first: Optional[list] = None) -> None:
    """Copies ``n`` bytes from ``reader`` to ``writer`` in chunks of ``CHUNK`` bytes, waiting
    while the writer's peer is not reading; ``on_chunk`` sees each chunk first.

    Whole chunks, not whatever each socket read returned: on loopback the transfer is a copy,
    and writing each 64 KiB as it arrives cost ~50% more CPU (sends, and the client's wakeups)
    than store-and-forward for no gain in throughput; 1 MiB chunks cost the same as it while
    keeping the memory per frame bounded and the transfers overlapped. ``first`` (bytes already
    due to ``writer``, e.g. the frame's head) leaves with the first chunk, in one send."""
    while n > 0:
        try:
            chunk = await reader.readexactly(min(n, CHUNK))
        except asyncio.IncompleteReadError:
            raise ConnectionError("connection closed inside a frame") from None
        n -= len(chunk)
        if on_chunk is not None:
            on_chunk(chunk)
        if first:
            send(writer, *first, chunk)
            first = None
        else:
            send(writer, chunk)
        await writer.drain()
    if first:
        send(writer, *first)


async def skip(reader: asyncio.StreamReader, n: int) -> None:
    """Reads and drops ``n`` bytes."""
    while n > 0:
        chunk = await reader.read(min(n, CHUNK))
        if not chunk:
            raise ConnectionError("connection closed inside a frame")
        n -= len(chunk)
