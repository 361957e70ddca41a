"""Big inspected requests decoded, and their big answers encoded, off the event loop.

Python's decode of a request costs time in proportion to its size (an AlterClientQuotas of
1 MiB of empty entries takes seconds and makes a million objects), and the event loop serves
every connection's inspected APIs: done on the loop, one client's big request would hold every
other client's ApiVersions, Metadata and SASL. So a decoded request is bounded first
(``kquota.proxy.decoded.request.max.bytes``: a longer one closes its connection undecoded; the
objects it makes bound the garbage collector's walks, which hold the GIL on any thread), and
bodies over :data:`OFFLOAD_BYTES` go to one worker thread: the loop keeps running (the GIL is
handed over every ``sys.getswitchinterval()``), and big requests wait for each other, not for
the loop.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kquota.kafka.protocol.codec import CodecError, decode_body, encode_body

#: Frames (and answers of as many entries as such a frame holds) above this are worked on the
#: worker thread; smaller ones on the loop, where a thread hop would cost more than the work.
OFFLOAD_BYTES = 64 << 10
#: An answer with more entries than this is encoded on the worker thread.
OFFLOAD_ENTRIES = 2048

_WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kquota-decode")


async def decode_request(schema: str, header: Any, frame: bytes, limit: int) -> dict:
    """The body of a request ``frame`` whose header the native plane parsed; ``CodecError`` (the
    connection is closed) when the frame is longer than ``limit``."""
    if len(frame) > limit:
        raise CodecError(f"{schema} of {len(frame)} bytes: the proxy decodes at most {limit} "
                         "(kquota.proxy.decoded.request.max.bytes)")
    if len(frame) <= OFFLOAD_BYTES:
        return decode_body(schema, header.api_version, frame, header.body_offset)
    return await asyncio.get_running_loop().run_in_executor(
        _WORKER, decode_body, schema, header.api_version, frame, header.body_offset)


async def encode_answer(schema: str, version: int, body: dict, entries: int) -> bytes:
    """``body`` encoded; ``entries``: how many repeated items it holds (its cost)."""
    if entries <= OFFLOAD_ENTRIES:
        return bytes(encode_body(schema, version, body))
    return await asyncio.get_running_loop().run_in_executor(_WORKER, lambda: bytes(encode_body(schema, version, body)))
