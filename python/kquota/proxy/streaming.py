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
  the last ``TAIL_HOLD`` bytes are held back and the frame's chunks kept, so that the
  tagged-field section can be found (the codec's own skip logic, walking the chunks in place)
  and rewritten to exactly its old length (:func:`kquota.proxy.addresses.fit_streamed_tail`).
  If the section begins before the held tail, the connection is closed rather than an address
  leaked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Callable, Optional

#: Frames at least this long are streamed (cut-through) when their API allows it.
STREAM_MIN = 65536
#: The head of a streamed frame read before deciding (longer headers fall back to whole frames).
HEAD = 8192
#: The end of a streamed Fetch v16+ response held back to rewrite NodeEndpoints in place.
TAIL_HOLD = 65536
#: Bytes relayed per write while streaming (the stream readers' limit lets this much buffer).
CHUNK = 1 << 20

#: A streamed response's plan: (prefixed head to send — or the whole answer if ``replace``;
#: throttle; replace; a coroutine function ``(chunks, held_from) -> tail`` fitting the held
#: tail, or ``None``).
StreamPlan = tuple[bytes, int, bool, Optional[Callable[[list, int], Awaitable[bytes]]]]


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int,
               kept: Optional[list] = None) -> None:
    """Copies ``n`` bytes from ``reader`` to ``writer`` in chunks of ``CHUNK`` bytes, waiting
    while the writer's peer is not reading; chunks are appended to ``kept`` if given.

    Whole chunks, not whatever each socket read returned: on loopback the transfer is a copy,
    and writing each 64 KiB as it arrives cost ~50% more CPU (sends, and the client's wakeups)
    than store-and-forward for no gain in throughput; 1 MiB chunks cost the same as it while
    keeping the memory per frame bounded and the transfers overlapped."""
    while n > 0:
        try:
            chunk = await reader.readexactly(min(n, CHUNK))
        except asyncio.IncompleteReadError:
            raise ConnectionError("connection closed inside a frame") from None
        n -= len(chunk)
        if kept is not None:
            kept.append(chunk)
        writer.write(chunk)
        await writer.drain()


async def skip(reader: asyncio.StreamReader, n: int) -> None:
    """Reads and drops ``n`` bytes."""
    while n > 0:
        chunk = await reader.read(min(n, CHUNK))
        if not chunk:
            raise ConnectionError("connection closed inside a frame")
        n -= len(chunk)
