"""The principal of a SASL exchange the proxy passes through (PLAIN, SCRAM, OAUTHBEARER): the
name a client's token presents, adopted only once the broker has completed that exchange.

The broker authenticates; the proxy reads the username as Kafka's ``PlainSaslServer`` /
``ScramSaslServer`` / ``OAuthBearerSaslServer`` name the principal, and follows the exchange round
by round as Kafka's ``SaslServerAuthenticator`` runs it, because an answer with ErrorCode 0 is not
by itself a success:

- PLAIN is one round; ``PlainSaslServer`` completes it with an empty answer.
- SCRAM is two. ``ScramSaslServer`` answers the client-first message (``n,,n=NAME,r=...``) with
  the server-first challenge (ErrorCode 0) whoever NAME is; only the client-final message (with
  its proof ``p=``) answered with the server-final ``v=...`` completes it. A bad proof is an error
  (Kafka) or a server-final ``e=...`` (RFC 5802): nothing.
- OAUTHBEARER: ``OAuthBearerSaslServer`` answers a valid token with empty bytes; an invalid one
  with an ErrorCode-0 challenge carrying the error JSON, then fails the client's ``\\x01`` round.

Each SaslAuthenticate request is bound, when it is read (in request order), to the exchange its
handshake opened and to its round in it; the answer decides that round only. A later exchange
(KIP-368 re-authentication) may only confirm the principal: Kafka's ``ReauthInfo
.ensurePrincipalUnchanged`` refuses a re-authentication as someone else and closes the
connection. GSSAPI's principal is inside the Kerberos ticket, which the proxy cannot read: such
clients are ANONYMOUS once the broker answers a round with empty bytes (its completion).

SCRAM with the extension ``tokenauth=true`` is a delegation token (KIP-48): the username is the
token id and Kafka's principal the token's owner, which the exchange does not name: the proxy
asks the cluster (:mod:`kquota.proxy.token_owners`); where it cannot tell, the connection is
counted under the token id and is never an admin (see docs/guides/proxy.md).
"""

from __future__ import annotations

import base64
import json
from typing import Optional

ANONYMOUS = "ANONYMOUS"


def username(mechanism: Optional[str], auth_bytes: bytes) -> Optional[str]:
    """The username in a client's first SASL token, or ``None`` if the mechanism hides it."""
    if not mechanism:
        return None
    mech = mechanism.upper()
    data = bytes(auth_bytes)
    if mech == "PLAIN":
        # [authzid] NUL authcid NUL passwd (RFC 4616); Kafka's principal is the authcid, and
        # PlainSaslServer refuses an authzid that differs from it.
        parts = data.split(b"\x00")
        if len(parts) != 3 or not parts[1] or parts[0] not in (b"", parts[1]):
            return None
        return parts[1].decode("utf-8", "replace")
    if mech.startswith("SCRAM-"):
        return _scram_first(data)[0]
    if mech == "OAUTHBEARER":
        return _oauthbearer_subject(data)
    return None


def _scram_first(data: bytes) -> tuple[Optional[str], bool]:
    """(saslname, tokenauth) of a SCRAM client-first message: gs2-header ``n,,`` or
    ``n,a=authzid,`` then ``n=saslname,r=nonce[,extensions]`` (RFC 5802; Kafka's extensions,
    ``tokenauth=true`` among them, follow the nonce). ``None`` for anything else, an authzid
    other than the name included (``ScramSaslServer`` refuses it)."""
    fields = data.decode("utf-8", "replace").split(",")
    if len(fields) < 4 or fields[0] not in ("n", "y") or not fields[2].startswith("n=") \
            or not fields[3].startswith("r="):
        return None, False
    name = fields[2][2:].replace("=2C", ",").replace("=3D", "=")
    if not name or fields[1] not in ("", "a=" + fields[2][2:]):
        return None, False
    return name, "tokenauth=true" in fields[4:]


def _oauthbearer_subject(data: bytes) -> Optional[str]:
    """The ``sub`` claim of the bearer token (RFC 7628 client response: gs2 header, then
    ``\x01``-separated ``key=value`` pairs with ``auth=Bearer <JWT>``), the principal name of
    Kafka's OAUTHBEARER validators (``sasl.oauthbearer.sub.claim.name`` defaults to ``sub``).
    The signature is the broker's to check; the proxy adopts the name only once it accepts. A
    gs2 authzid other than the subject names no one (``OAuthBearerSaslServer`` fails it)."""
    items = data.split(b"\x01")
    authzid = items[0].split(b",")[1] if items[0].count(b",") >= 2 else b""
    for item in items[1:]:
        if not item.startswith(b"auth="):
            continue
        scheme, _, token = item[5:].partition(b" ")
        parts = token.strip().split(b".")
        if scheme.lower() != b"bearer" or len(parts) != 3:
            return None
        try:
            claims = json.loads(base64.urlsafe_b64decode(parts[1] + b"=" * (-len(parts[1]) % 4)))
        except (ValueError, UnicodeDecodeError):
            return None
        sub = claims.get("sub") if isinstance(claims, dict) else None
        if not isinstance(sub, str) or not sub:
            return None
        if authzid and authzid != b"a=" + sub.encode("utf-8", "surrogatepass"):
            return None
        # JSON may escape a lone surrogate, which no UTF-8 name (nor the kernel's) can hold:
        # replaced, as the other mechanisms' undecodable bytes are.
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in sub)
    return None


class Exchange:
    """One SASL exchange: opened by a SaslHandshake, run by the SaslAuthenticate rounds after it.
    ``requests`` counts the rounds read; ``name`` is the client-first message's (SCRAM), set once
    the broker answered it with its challenge; ``over`` once the exchange completed or failed."""

    __slots__ = ("mechanism", "requests", "name", "token", "over")

    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism.upper()
        self.requests = 0
        self.name: Optional[str] = None
        self.token = False
        self.over = False


class Round:
    """One SaslAuthenticate request of an exchange: its index and the client's token."""

    __slots__ = ("exchange", "index", "token")

    def __init__(self, exchange: Exchange, index: int, token: bytes) -> None:
        self.exchange = exchange
        self.index = index
        self.token = token


#: What an answered round did to the connection.
NOTHING, AUTHENTICATED, REFUSED = 0, 1, 2


class Authentication:
    """A connection's SASL state. On a SASL listener the connection is unauthenticated (its
    principal ANONYMOUS) until an exchange completes; on any other it is authenticated from the
    start with ``principal`` (ANONYMOUS or its certificate's), and no exchange ever changes it."""

    def __init__(self, sasl_listener: bool, principal: str = ANONYMOUS) -> None:
        self.sasl_listener = sasl_listener
        self.authenticated = not sasl_listener
        self.principal = principal if not sasl_listener else ANONYMOUS
        #: Authenticated by a delegation token whose owner the proxy does not know.
        self.token_authenticated = False
        #: What the completed exchange named (name, delegation token?): a re-authentication must
        #: name the same.
        self._identity: Optional[tuple[str, bool]] = None
        self._exchange: Optional[Exchange] = None

    def handshake(self, mechanism: str) -> Exchange:
        """A SaslHandshake read: the exchange it opens (the rounds after it belong to it)."""
        self._exchange = Exchange(mechanism)
        return self._exchange

    @staticmethod
    def handshake_answered(exchange: Exchange, error_code: int) -> None:
        """A refused mechanism ends the exchange before it began."""
        if error_code != 0:
            exchange.over = True

    def round(self, token: bytes) -> Optional[Round]:
        """A SaslAuthenticate read: its round in the open exchange (``None``: no exchange is
        open, and its answer changes nothing)."""
        ex = self._exchange
        if ex is None:
            return None
        ex.requests += 1
        return Round(ex, ex.requests - 1, bytes(token))

    def answered(self, rnd: Optional[Round], error_code: int, auth_bytes: bytes) -> int:
        """The broker's answer to a round: ``AUTHENTICATED`` when it completed its exchange and
        the principal is now set (or confirmed), ``REFUSED`` when a completed re-authentication
        named another principal (the connection must close, as Kafka closes it), else
        ``NOTHING``."""
        if rnd is None or rnd.exchange.over:
            return NOTHING
        ex = rnd.exchange
        if error_code != 0:
            ex.over = True
            return NOTHING
        name = self._completed(ex, rnd, bytes(auth_bytes))
        if name is None:
            return NOTHING
        ex.over = True
        if self.sasl_listener and self.authenticated:
            # KIP-368: only the same principal may re-authenticate.
            return AUTHENTICATED if (name, ex.token) == self._identity else REFUSED
        if not self.sasl_listener:
            return NOTHING
        self.authenticated = True
        self.principal = name
        self.token_authenticated = ex.token
        self._identity = (name, ex.token)
        return AUTHENTICATED

    def token_owner(self, owner: str) -> None:
        """The owner of the delegation token that authenticated the connection: its principal
        from now on (``ScramSaslServer``'s authorization id)."""
        if self.token_authenticated:
            self.principal = owner
            self.token_authenticated = False

    @staticmethod
    def _completed(ex: Exchange, rnd: Round, answer: bytes) -> Optional[str]:
        """The principal if this round, answered with ErrorCode 0 and ``answer``, completed the
        exchange (ends a failed one as ``over``)."""
        mech = ex.mechanism
        if mech == "PLAIN":
            if rnd.index != 0:
                ex.over = True
                return None
            return username(mech, rnd.token)
        if mech.startswith("SCRAM-"):
            if rnd.index == 0:
                name, token = _scram_first(rnd.token)
                if name is None or not answer.startswith(b"r="):
                    ex.over = True
                    return None
                ex.name, ex.token = name, token
                return None
            final = rnd.token.split(b",")
            if rnd.index != 1 or ex.name is None or not any(f.startswith(b"p=") for f in final) \
                    or not answer.startswith(b"v="):
                ex.over = True
                return None
            return ex.name
        if mech == "OAUTHBEARER":
            if rnd.index != 0 or answer:
                ex.over = True  # the error challenge: the next round is the failure
                return None
            return username(mech, rnd.token)
        if mech == "GSSAPI":
            # RFC 4752 over Kafka's GSSAPI server: the Kerberos context (at least one round),
            # the server's security-layer offer, then the client's choice, answered with empty
            # bytes when the server completes: no completion before the third round. The
            # principal is in the ticket, which the proxy cannot read: ANONYMOUS, with the
            # pre-authentication bounds lifted (the broker, not the proxy, decided).
            return ANONYMOUS if rnd.index >= 2 and not answer else None
        ex.over = True
        return None
