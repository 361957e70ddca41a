"""TLS settings of ``kquota proxy`` in Kafka's own terms, checked at start-up.

- :func:`parse_listener`: Kafka's listener form ``PROTOCOL://HOST:PORT`` (``--listen``,
  ``--bootstrap-server``); PLAINTEXT when no scheme is given.
- :func:`listener_tls`: a TLS listener's ``ssl.*`` broker properties (from ``--config``), with
  Kafka's ``listener.name.<listener>.`` overrides; the native builder reads every file now.
- :func:`upstream_security`: the proxy's own connections to the brokers from Kafka client
  properties (``--broker-config``): ``security.protocol``, ``ssl.*`` (built natively now),
  ``sasl.*`` passed through untouched.

A bad value is a :class:`~kquota.exceptions.KQuotaError` of one line naming the file and the
property (``proxy.properties: ssl.keystore.password: wrong password for the PKCS12 store
(/etc/kquota/ks.p12)``). The values returned are plain data the data plane is handed later: the
``ssl.*`` dictionaries are exactly what the native builders take.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from kquota.exceptions import KQuotaError
from kquota.kafka.client_security import SECURITY_PROTOCOLS

__all__ = [
    "LISTENER_TLS_PROPERTIES", "UPSTREAM_TLS_PROPERTIES", "Listener", "ListenerTls",
    "UpstreamSecurity", "parse_listener", "listener_tls", "upstream_security", "principal_mapper",
    "unknown_ssl_properties",
]

_STORE = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates", "ssl.enabled.protocols", "ssl.cipher.suites",
)
#: The broker properties a TLS listener takes (the native builder's input, plus the mapping rules).
LISTENER_TLS_PROPERTIES = _STORE + ("ssl.client.auth", "ssl.principal.mapping.rules")
#: The client properties the proxy's TLS connections to the brokers take.
UPSTREAM_TLS_PROPERTIES = _STORE + ("ssl.endpoint.identification.algorithm",)


@dataclass(frozen=True)
class Listener:
    """A parsed ``PROTOCOL://HOST:PORT``."""

    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        """Whether connections are TLS (SSL, SASL_SSL)."""
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        """Whether clients authenticate with SASL (SASL_PLAINTEXT, SASL_SSL)."""
        return self.protocol.startswith("SASL_")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol}://{host}:{self.port}"


def parse_listener(text: str, what: str = "--listen") -> Listener:
    """``[PROTOCOL://]HOST:PORT`` (IPv6 as ``[::1]:9092``); PLAINTEXT when no scheme is given."""
    scheme, sep, address = text.strip().partition("://")
    if not sep:
        scheme, address = "PLAINTEXT", text.strip()
    protocol = scheme.upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise KQuotaError(f"{what}: unknown security protocol {scheme!r} in {text!r}: expected one of "
                          + ", ".join(SECURITY_PROTOCOLS))
    host, colon, port = address.rpartition(":")
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            raise KQuotaError(f"{what} must be [PROTOCOL://]HOST:PORT, got {text!r}")
        host = host[1:-1]
    elif ":" in host:
        raise KQuotaError(f"{what}: an IPv6 address goes in brackets ([::1]:9092), got {text!r}")
    if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise KQuotaError(f"{what} must be [PROTOCOL://]HOST:PORT, got {text!r}")
    return Listener(protocol, host, int(port))


def _native():
    from kquota import _kquota
    return _kquota


def _build_error(source: str, err: Exception) -> KQuotaError:
    return KQuotaError(f"{source}: {err}")


@dataclass(frozen=True)
class ListenerTls:
    """A TLS listener's settings: ``properties`` for the native ListenerTls (``ssl.*`` including
    ``ssl.principal.mapping.rules``), the rules alone, ``watched_files`` reloaded on change."""

    properties: dict[str, str]
    principal_mapping_rules: Optional[str]
    watched_files: tuple[str, ...]
    source: str


def _effective(props: Mapping[str, str], listener_name: Optional[str]) -> dict[str, str]:
    """``props`` with Kafka's ``listener.name.<name>.<property>`` overrides applied."""
    out = {k: v for k, v in props.items() if not k.startswith("listener.name.")}
    if listener_name:
        prefix = f"listener.name.{listener_name.lower()}."
        out.update({k[len(prefix):]: v for k, v in props.items() if k.startswith(prefix)})
    return out


def listener_tls(props: Mapping[str, str], source: str, listener: Listener) -> ListenerTls:
    """The TLS settings of ``listener`` (SSL or SASL_SSL) from broker properties read from
    ``source``; the server configuration is built (files read, passwords tried) now."""
    if not listener.tls:
        raise KQuotaError(f"{listener}: not a TLS listener")
    eff = _effective(props, listener.protocol)
    tls = {k: v for k, v in eff.items() if k in LISTENER_TLS_PROPERTIES}
    rules = eff.get("ssl.principal.mapping.rules")
    try:
        files = _native().check_listener_tls(tls)
    except ValueError as e:
        raise _build_error(source, e) from None
    return ListenerTls(tls, rules, tuple(files), source)


def principal_mapper(settings: ListenerTls):
    """The native ``SslPrincipalMapper`` of a listener's ``ssl.principal.mapping.rules``."""
    return _native().SslPrincipalMapper(settings.principal_mapping_rules)


@dataclass(frozen=True)
class UpstreamSecurity:
    """The proxy's connections to the brokers: ``protocol`` (``security.protocol``), ``tls``
    (``ssl.*`` for the native client builder; None for PLAINTEXT / SASL_PLAINTEXT), ``sasl``
    (``sasl.*`` as given), ``watched_files``."""

    protocol: str
    tls: Optional[dict[str, str]]
    sasl: dict[str, str] = field(default_factory=dict)
    watched_files: tuple[str, ...] = ()
    source: str = ""


def upstream_security(props: Mapping[str, str], source: str, bootstrap: Listener) -> UpstreamSecurity:
    """The upstream settings from client properties read from ``source`` (``--broker-config``)
    and the ``--bootstrap-server`` scheme: the two must agree when both are given."""
    declared = props.get("security.protocol", "").strip()
    if declared:
        protocol = declared.upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise KQuotaError(f"{source}: security.protocol: invalid value {declared!r}: expected one of "
                              + ", ".join(SECURITY_PROTOCOLS))
        if bootstrap.protocol != "PLAINTEXT" and bootstrap.protocol != protocol:
            raise KQuotaError(f"{source}: security.protocol: {protocol} contradicts --bootstrap-server "
                              f"{bootstrap}")
    else:
        protocol = bootstrap.protocol
    sasl = {k: v for k, v in props.items() if k.startswith("sasl.")}
    if protocol not in ("SSL", "SASL_SSL"):
        return UpstreamSecurity(protocol, None, sasl, (), source)
    tls = {k: v for k, v in props.items() if k in UPSTREAM_TLS_PROPERTIES}
    try:
        files = _native().check_upstream_tls(tls)
    except ValueError as e:
        raise _build_error(source, e) from None
    return UpstreamSecurity(protocol, tls, sasl, tuple(files), source)


def unknown_ssl_properties(props: Mapping[str, str], known: tuple[str, ...]) -> list[str]:
    """``ssl.*`` keys the proxy does not use (to be reported, as a broker reports unused ones)."""
    return sorted(k for k in props if k.startswith("ssl.") and k not in known)
