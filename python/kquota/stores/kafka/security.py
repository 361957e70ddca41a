"""The Kafka store's and the fleet's own connections to a secured cluster: Kafka client
properties (``kquota proxy --store-config``, else its ``--broker-config`` for a store on the
proxied cluster; ``kquota configs --command-config``) as librdkafka's settings.

The properties are read and checked by :func:`kquota.kafka.client_security.client_security`
(its stores by the data plane's own reader), with the same one-line errors as every other kquota
client; the certificates go to librdkafka as PEM text (``ssl.ca.pem``, ``ssl.certificate.pem``,
``ssl.key.pem``), so PKCS12, untyped and inline PEM stores work as Kafka reads them, and the key
is handed over sealed (encrypted under a fresh random password, ``ssl.key.password``).
"""

from __future__ import annotations

from typing import Mapping, Optional

from kquota.kafka.client_security import client_security

__all__ = ["librdkafka_security"]


def librdkafka_security(props: Optional[Mapping[str, str]], source: str) -> dict[str, str]:
    """librdkafka's settings for Kafka client ``props`` read from ``source`` (``{}``: PLAINTEXT)."""
    if not props:
        return {}
    sec = client_security(props, source)
    out = {"security.protocol": sec.protocol.lower()}
    if sec.tls is not None:
        if sec.tls.ca_pem is not None:
            out["ssl.ca.pem"] = sec.tls.ca_pem
        if sec.tls.identity_pem is not None:
            # One PEM holds the key and the chain: each setting reads the blocks of its kind.
            identity = sec.tls.identity_pem.decode("ascii", "replace")
            out["ssl.certificate.pem"] = identity
            out["ssl.key.pem"] = identity
            if sec.tls.key_password:
                out["ssl.key.password"] = sec.tls.key_password
        out["ssl.endpoint.identification.algorithm"] = "https" if sec.tls.check_hostname else "none"
    if sec.sasl:
        out.update({"sasl.mechanisms": str(sec.sasl_mechanism), "sasl.username": str(sec.username),
                    "sasl.password": str(sec.password)})
    return out
