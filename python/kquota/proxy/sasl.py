"""The principal name of a SASL exchange the proxy passes through (PLAIN and SCRAM).

The broker authenticates; the proxy only reads the username the client presents, as Kafka's
``PlainSaslServer`` / ``ScramSaslServer`` name the principal, and adopts it once the broker
answers the SaslAuthenticate request without error.
"""

from __future__ import annotations

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
    return None
