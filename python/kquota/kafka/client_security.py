"""Kafka client properties (``--command-config``, as kafka-configs reads them) for kquota's own
connections to a cluster: ``security.protocol``, ``ssl.*`` as Python's :mod:`ssl` context (and
as PEM text, :class:`TlsMaterial`, for librdkafka), ``sasl.*`` as SASL/PLAIN credentials.

The ``ssl.*`` stores are read by the reader of the proxy's data plane (Rust,
``kquota._kquota.client_tls_pem``), so a properties file means the same to every kquota client:
PEM files, inline PEM (KIP-651: ``ssl.truststore.certificates``, ``ssl.keystore.certificate.chain``,
``ssl.keystore.key``) and PKCS12; when ``ssl.*.type`` is not set (Kafka's default is JKS) the
file's own format is recognised, and a JKS store is refused with the command that converts it.
``ssl.endpoint.identification.algorithm`` is ``https`` (the server's certificate must name the
host) unless set to empty. ``sasl.mechanism`` is GSSAPI unless set, as in Kafka; PLAIN is the
mechanism supported here, its credentials read from ``sasl.jaas.config``'s ``PlainLoginModule``.
Every bad value is one :class:`~kquota.exceptions.KQuotaError` line naming the file and property.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import ssl
import tempfile
from dataclasses import dataclass
from typing import Iterator, Mapping, Optional

from kquota.exceptions import KQuotaError

__all__ = ["SECURITY_PROTOCOLS", "ClientSecurity", "TlsMaterial", "client_security", "parse_jaas_config", "tls_material"]

#: Kafka's security protocols (SecurityProtocol).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

_TLS_KEYS = (
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.endpoint.identification.algorithm",
)


@dataclass(frozen=True)
class ClientSecurity:
    """How to connect: ``protocol`` (Kafka's ``security.protocol``), ``ssl_context`` for SSL and
    SASL_SSL (``client_certificate`` if it presents one; ``tls``: the material it was built from),
    SASL/PLAIN ``username`` and ``password`` for the SASL protocols; ``ignored``: the given
    properties that are not used."""

    protocol: str = "PLAINTEXT"
    ssl_context: Optional[ssl.SSLContext] = None
    sasl_mechanism: Optional[str] = None
    username: Optional[str] = None
    password: Optional[str] = None
    ignored: tuple[str, ...] = ()
    client_certificate: bool = False
    tls: Optional["TlsMaterial"] = None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


_JAAS_OPTION = re.compile(r'\s*([A-Za-z0-9_.-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)')


def parse_jaas_config(text: str, where: str) -> tuple[str, dict[str, str]]:
    """``LoginModuleClass flag key="value" ...;`` -> (class, options), as Kafka's ``JaasConfig``
    reads one login module (quoted values may contain blanks; ``\\"`` escapes a quote)."""
    m = re.match(r"\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b", text)
    if not m:
        raise KQuotaError(f"{where}: expected 'LoginModuleClass required key=\"value\" ...;'")
    pos = m.end()
    options: dict[str, str] = {}
    while True:
        o = _JAAS_OPTION.match(text, pos)
        if not o:
            break
        value = o.group(2)
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[o.group(1)] = value
        pos = o.end()
    if text[pos:].strip() != ";":
        raise KQuotaError(f"{where}: cannot read {text[pos:].strip()[:40]!r} (one login module, ending in ';')")
    return m.group(1), options


def _sasl(props: Mapping[str, str], source: str) -> tuple[str, str, str]:
    mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper() or "GSSAPI"
    if mechanism != "PLAIN":
        default = " (Kafka's default)" if "sasl.mechanism" not in props else ""
        raise KQuotaError(f"{source}: sasl.mechanism: {mechanism}{default} is not supported by kquota's "
                          "client: use sasl.mechanism=PLAIN")
    jaas = props.get("sasl.jaas.config", "").strip()
    if not jaas:
        raise KQuotaError(f"{source}: sasl.jaas.config is missing (org.apache.kafka.common.security.plain."
                          'PlainLoginModule required username="..." password="...";)')
    module, options = parse_jaas_config(jaas, f"{source}: sasl.jaas.config")
    if not module.endswith("PlainLoginModule"):
        raise KQuotaError(f"{source}: sasl.jaas.config: {module} is not PLAIN's login module (PlainLoginModule)")
    if "username" not in options or "password" not in options:
        raise KQuotaError(f"{source}: sasl.jaas.config: PlainLoginModule needs username and password")
    return mechanism, options["username"], options["password"]


@dataclass(frozen=True)
class TlsMaterial:
    """What Kafka client properties say about TLS, read and checked once: the CA certificates
    (PEM; ``None``: the system's), the client's sealed key and certificate chain (one PEM;
    ``None``: no client certificate) and the password it is sealed under, and whether the
    server's certificate must name its host (``ssl.endpoint.identification.algorithm``)."""

    ca_pem: Optional[str]
    identity_pem: Optional[bytes]
    key_password: Optional[str]
    check_hostname: bool


def tls_material(props: Mapping[str, str], source: str) -> TlsMaterial:
    """The TLS material of client properties read from ``source`` (one error line per bad value),
    read by the data plane's own reader (``kquota._kquota.client_tls_pem``), so that a file means
    the same to every kquota client. The key comes sealed: encrypted under a fresh random password
    held only in memory, so what ``load_cert_chain`` or librdkafka reads may be seen by no one."""
    from kquota import _kquota

    seal = secrets.token_urlsafe(32)
    try:
        ca_pem, chain, key, check_hostname = _kquota.client_tls_pem(dict(props), seal)
    except ValueError as e:
        raise KQuotaError(f"{source}: {e}") from None
    if key is None or chain is None:
        return TlsMaterial(ca_pem, None, None, check_hostname)
    return TlsMaterial(ca_pem, (key + chain).encode(), seal, check_hostname)


@contextlib.contextmanager
def _key_file(pem: bytes) -> Iterator[str]:
    """A path ``load_cert_chain`` (which reads files only) can open holding ``pem``: an anonymous
    in-memory file where the system has them (Linux), else a private temporary file removed at
    once (its key sealed by :func:`tls_material`)."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("kquota-keystore", os.MFD_CLOEXEC)
        try:
            view = memoryview(pem)
            while view:
                view = view[os.write(fd, view):]
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix="kquota-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        yield path
    finally:
        os.unlink(path)


def _context(material: TlsMaterial, source: str) -> ssl.SSLContext:
    """Python's :mod:`ssl` client context for ``material``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # Kafka's ssl.enabled.protocols: TLSv1.2, TLSv1.3
    ctx.check_hostname = material.check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    try:
        if material.ca_pem is None:
            ctx.load_default_certs()  # as Java's default trust store
        else:
            ctx.load_verify_locations(cadata=material.ca_pem)
    except ssl.SSLError as e:
        raise KQuotaError(f"{source}: ssl.truststore: no usable CA certificate ({e.reason or e})") from None
    if material.identity_pem is not None:
        try:
            with _key_file(material.identity_pem) as path:
                ctx.load_cert_chain(path, password=material.key_password)
        except (ssl.SSLError, ValueError, TypeError) as e:
            raise KQuotaError(f"{source}: ssl.keystore: unusable key or certificate "
                              f"({getattr(e, 'reason', None) or e})") from None
    return ctx


def client_security(props: Mapping[str, str], source: str = "--command-config") -> ClientSecurity:
    """The connection settings of Kafka client properties read from ``source``."""
    declared = props.get("security.protocol", "PLAINTEXT").strip().upper() or "PLAINTEXT"
    if declared not in SECURITY_PROTOCOLS:
        raise KQuotaError(f"{source}: security.protocol: invalid value {props['security.protocol']!r}: "
                          "expected one of " + ", ".join(SECURITY_PROTOCOLS))
    material = tls_material(props, source) if declared in ("SSL", "SASL_SSL") else None
    ctx = _context(material, source) if material is not None else None
    mechanism = username = password = None
    if declared.startswith("SASL_"):
        mechanism, username, password = _sasl(props, source)
    known = _TLS_KEYS if ctx is not None else ()
    ignored = tuple(sorted(k for k in props if (k.startswith("ssl.") and k not in known)
                           or (k.startswith("sasl.") and mechanism is None)))
    identity = any(props.get(k, "").strip() for k in ("ssl.keystore.location", "ssl.keystore.key"))
    return ClientSecurity(declared, ctx, mechanism, username, password, ignored, ctx is not None and identity,
                          material)
