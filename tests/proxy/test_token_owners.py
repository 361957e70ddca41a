"""``kquota.proxy.token_owners``: the DescribeDelegationToken v1 answer read as Kafka writes it,
and a malformed one refused whole (the owner stays unknown) rather than half read."""

from __future__ import annotations

import struct

import pytest
from kquota.proxy.token_owners import MAX_CACHED, TokenOwners, token_owners


def s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def body(*tokens: tuple[str, str, str], error: int = 0) -> bytes:
    out = struct.pack(">hi", error, len(tokens))
    for kind, owner, token_id in tokens:
        out += s(kind) + s(owner) + struct.pack(">qqq", 1, 2, 3) + s(token_id) + struct.pack(">i", 3) + b"mac"
        out += struct.pack(">i", 1) + s("User") + s("renewer")
    return out + struct.pack(">i", 0)


def test_owners_of_every_token_listed():
    data = b"head" + body(("User", "alice", "t1"), ("Group", "ops", "t2"))
    assert token_owners(data, 4) == (0, {"t1": ("User", "alice"), "t2": ("Group", "ops")})
    assert token_owners(body(error=65), 0) == (65, {})  # DELEGATION_TOKEN_AUTH_DISABLED


@pytest.mark.parametrize("cut", [1, 5, 12, 40, -5])
def test_a_truncated_answer_is_refused_whole(cut):
    data = body(("User", "alice", "t1"))
    with pytest.raises(ValueError):
        token_owners(data[:cut], 0)


def test_impossible_counts_are_refused_before_any_allocation():
    with pytest.raises(ValueError, match="impossible token count"):
        token_owners(struct.pack(">hi", 0, 2**31 - 1), 0)


def test_the_cache_is_bounded():
    owners = TokenOwners("127.0.0.1:1", None)
    for i in range(MAX_CACHED + 10):
        owners._remember(f"t{i}", "alice", 0.0)
    assert len(owners._known) == MAX_CACHED and "t0" not in owners._known
