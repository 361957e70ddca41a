"""The principal name of a SASL exchange the proxy passes through (PLAIN, SCRAM, OAUTHBEARER).

The broker authenticates; the proxy only reads the username the client presents, as Kafka's
``PlainSaslServer`` / ``ScramSaslServer`` / ``OAuthBearerSaslServer`` name the principal, and
adopts it once the broker answers the SaslAuthenticate request without error. GSSAPI's
principal is inside the Kerberos ticket, which the proxy cannot read: such clients count as
ANONYMOUS.
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
        # [authzid] NUL authcid NUL passwd (RFC 4616); Kafka's principal is the authcid.
        parts = data.split(b"\x00")
        if len(parts) != 3 or not parts[1]:
            return None
        return parts[1].decode("utf-8", "replace")
    if mech.startswith("SCRAM-"):
        # gs2-header "n,," or "n,a=authzid," then "n=saslname,r=nonce" (RFC 5802).
        text = data.decode("utf-8", "replace")
        fields = text.split(",")
        for item in fields[2:]:
            if item.startswith("n="):
                return item[2:].replace("=2C", ",").replace("=3D", "=")
        return None
    if mech == "OAUTHBEARER":
        return _oauthbearer_subject(data)
    return None


def _oauthbearer_subject(data: bytes) -> Optional[str]:
    """The ``sub`` claim of the bearer token (RFC 7628 client response: gs2 header, then
    ``\x01``-separated ``key=value`` pairs with ``auth=Bearer <JWT>``), the principal name of
    Kafka's OAUTHBEARER validators (``sasl.oauthbearer.sub.claim.name`` defaults to ``sub``).
    The signature is the broker's to check; the proxy adopts the name only once it accepts."""
    for item in data.split(b"\x01")[1:]:
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
        # JSON may escape a lone surrogate, which no UTF-8 name (nor the kernel's) can hold:
        # replaced, as the other mechanisms' undecodable bytes are.
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in sub)
    return None
