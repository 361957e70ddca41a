"""``TokenOwners``: who owns a delegation token (KIP-48), asked of the cluster with the proxy's own
credentials, so that a client authenticated by a token counts as its owner, as at a broker.

A SCRAM exchange with the extension ``tokenauth=true`` names the token id, not a principal;
Kafka's ``ScramSaslServer`` makes the token's owner the principal. The proxy asks with
DescribeDelegationToken (v1: every token the proxy may describe, as a super user or with
DESCRIBE on the tokens) over one connection per lookup, and caches the owner (a token's owner
never changes) in a bounded table. Where the proxy may not describe the token, or the cluster
does not answer, the owner is unknown (``None``): the connection is counted under the token id
(see docs/guides/proxy.md). Lookups block: call them off the event loop.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections import OrderedDict
from typing import Any, Optional

from kquota.exceptions import KQuotaError

log = logging.getLogger("kquota.proxy")

DESCRIBE_DELEGATION_TOKEN = 41
#: Tokens whose owner is remembered (oldest forgotten first): bounded memory.
MAX_CACHED = 10_000
#: How long an unknown owner is remembered before asking again (a token the proxy may not
#: describe stays unknown; one created a moment ago is found on the next lookup after this).
UNKNOWN_SECONDS = 30.0

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class _Reader:
    """Reads a non-flexible Kafka body; ``ValueError`` when it ends too soon."""

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def fixed(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.data):
            raise ValueError("truncated DescribeDelegationToken response")
        value = s.unpack_from(self.data, self.pos)[0]
        self.pos += s.size
        return int(value)

    def blob(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise ValueError("truncated DescribeDelegationToken response")
        self.pos += size
        return self.data[self.pos - size:self.pos]

    def string(self) -> str:
        return self.blob(self.fixed(_I16)).decode("utf-8", "replace")


def token_owners(body: bytes, pos: int) -> tuple[int, dict[str, tuple[str, str]]]:
    """(ErrorCode, token id -> (owner principal type, name)) of a DescribeDelegationToken v1
    response body at ``pos`` (``ValueError`` if malformed)."""
    r = _Reader(body, pos)
    error = r.fixed(_I16)
    owners = {}
    count = r.fixed(_I32)
    if count > len(body):
        raise ValueError("DescribeDelegationToken response: impossible token count")
    for _ in range(max(count, 0)):
        owner = (r.string(), r.string())
        r.fixed(_I64), r.fixed(_I64), r.fixed(_I64)  # issue, expiry, max timestamps
        token_id = r.string()
        r.blob(r.fixed(_I32))  # the HMAC: never kept
        renewers = r.fixed(_I32)
        if renewers > len(body):
            raise ValueError("DescribeDelegationToken response: impossible renewer count")
        for _ in range(max(renewers, 0)):
            r.string(), r.string()
        owners[token_id] = owner
    return error, owners


class TokenOwners:
    """The owners of delegation tokens, looked up at ``bootstrap`` (``host:port``) with
    ``security`` (a :class:`kquota.kafka.client_security.ClientSecurity`: the proxy's own)."""

    def __init__(self, bootstrap: str, security: Any, timeout: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.timeout = timeout
        self._lock = threading.Lock()
        self._known: OrderedDict[str, tuple[Optional[str], float]] = OrderedDict()

    def owner(self, token_id: str) -> Optional[str]:
        """The owner's User name, or ``None`` where the proxy cannot tell (blocking)."""
        now = time.monotonic()
        with self._lock:
            hit = self._known.get(token_id)
        if hit is not None and (hit[0] is not None or now < hit[1]):
            return hit[0]
        owners = self._describe()
        found = owners.get(token_id)
        name = found[1] if found is not None and found[0] == "User" else None
        if name is None:
            log.info("delegation token %s: owner unknown to the proxy (may it describe the token?): counted "
                     "under the token id", token_id)
        with self._lock:
            for tid, (kind, owner) in owners.items():
                if kind == "User":
                    self._remember(tid, owner, now)
            self._remember(token_id, name, now + UNKNOWN_SECONDS)
        return name

    def _remember(self, token_id: str, owner: Optional[str], until: float) -> None:
        self._known[token_id] = (owner, until)
        self._known.move_to_end(token_id)
        while len(self._known) > MAX_CACHED:
            self._known.popitem(last=False)

    def _describe(self) -> dict[str, tuple[str, str]]:
        from kquota.kafka.admin_client import AdminConnection

        try:
            with AdminConnection(self.bootstrap, self.security, timeout=self.timeout,
                                 client_id="kquota-proxy-token-owners") as conn:
                frame, pos = conn.exchange(DESCRIBE_DELEGATION_TOKEN, 1, _I32.pack(-1))  # Owners: null = all
            error, owners = token_owners(frame, pos)
        except (KQuotaError, ValueError) as e:
            log.warning("delegation token owners: DescribeDelegationToken at %s failed: %s", self.bootstrap, e)
            return {}
        if error:
            log.warning("delegation token owners: DescribeDelegationToken at %s refused (error code %d)",
                        self.bootstrap, error)
            return {}
        return owners
