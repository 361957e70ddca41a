"""Kafka client properties (``--command-config``, as kafka-configs reads them) for kquota's own
connections to a cluster: ``security.protocol``, ``ssl.*`` as Python's :mod:`ssl` context,
``sasl.*`` as SASL/PLAIN credentials.

Kafka's names and defaults: ``ssl.truststore.type`` and ``ssl.keystore.type`` are JKS unless set
(JKS cannot be read here: the error says how to convert it), ``PEM`` and ``PKCS12`` are read
(``PKCS12`` needs the ``cryptography`` package); ``ssl.truststore.certificates``,
``ssl.keystore.certificate.chain`` and ``ssl.keystore.key`` hold inline PEM (KIP-651);
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
_JKS_HINT = ("JKS cannot be read here: convert it with `keytool -importkeystore -srcstoretype JKS "
             "-deststoretype PKCS12 ...` and set {key}=PKCS12 (or PEM)")


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


def _store_type(props: Mapping[str, str], key: str, source: str) -> str:
    kind = props.get(key, "JKS").strip().upper() or "JKS"
    if kind == "JKS":
        raise KQuotaError(f"{source}: {key}: " + _JKS_HINT.format(key=key)
                          + (" (JKS is Kafka's default when the type is not set)" if key not in props else ""))
    if kind not in ("PEM", "PKCS12"):
        raise KQuotaError(f"{source}: {key}: unsupported store type {kind!r}: expected PEM or PKCS12")
    return kind


def _read(path: str, key: str, source: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise KQuotaError(f"{source}: {key}: cannot read {path!r}: {e.strerror or e}") from None


def _pkcs12(data: bytes, password: Optional[str], key: str, path: str, source: str):
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise KQuotaError(f"{source}: {key}: PKCS12 stores need the 'cryptography' package "
                          "(pip install 'kquota[tls]'), or use PEM") from None
    try:
        return pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise KQuotaError(f"{source}: {key}: wrong password or not a PKCS12 store ({path})") from None


def _trust(props: Mapping[str, str], source: str) -> Optional[str]:
    """The CA certificates (PEM) the server's certificate must chain to; ``None``: the system's
    (as Java's default trust store)."""
    inline = props.get("ssl.truststore.certificates", "").strip()
    location = props.get("ssl.truststore.location", "").strip()
    if inline and location:
        raise KQuotaError(f"{source}: set ssl.truststore.location or ssl.truststore.certificates, not both")
    if inline:
        return inline
    if not location:
        return None
    kind = _store_type(props, "ssl.truststore.type", source)
    data = _read(location, "ssl.truststore.location", source)
    if kind == "PEM":
        return data.decode("ascii", "replace")
    from cryptography.hazmat.primitives.serialization import Encoding

    store = _pkcs12(data, props.get("ssl.truststore.password"), "ssl.truststore.password", location, source)
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.append(store.cert.certificate)
    if not certs:
        raise KQuotaError(f"{source}: ssl.truststore.location: no certificate in {location}")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)


def _identity(props: Mapping[str, str], source: str) -> tuple[Optional[bytes], Optional[str]]:
    """The client's key and certificate chain (one PEM) and the key's password; ``(None, None)``
    without a keystore (one-way TLS)."""
    location = props.get("ssl.keystore.location", "").strip()
    chain, key_pem = props.get("ssl.keystore.certificate.chain", "").strip(), props.get("ssl.keystore.key", "").strip()
    if not location and not chain and not key_pem:
        return None, None
    password = props.get("ssl.key.password")
    if location:
        kind = _store_type(props, "ssl.keystore.type", source)
        data = _read(location, "ssl.keystore.location", source)
        if kind == "PEM":
            return data, password or None
        from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

        store = _pkcs12(data, props.get("ssl.keystore.password"), "ssl.keystore.password", location, source)
        if store.key is None or store.cert is None:
            raise KQuotaError(f"{source}: ssl.keystore.location: no key and certificate in {location}")
        pem = store.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        pem += b"".join(c.certificate.public_bytes(Encoding.PEM) for c in [store.cert, *store.additional_certs])
        return pem, None
    if not chain or not key_pem:
        raise KQuotaError(f"{source}: ssl.keystore.certificate.chain and ssl.keystore.key go together")
    return (key_pem + "\n" + chain + "\n").encode(), password or None


@dataclass(frozen=True)
class TlsMaterial:
    """What Kafka client properties say about TLS, read and checked once: the CA certificates
    (PEM; ``None``: the system's), the client's key and certificate chain (one PEM; ``None``:
    no client certificate) and the key's password, and whether the server's certificate must
    name its host (``ssl.endpoint.identification.algorithm``)."""

    ca_pem: Optional[str]
    identity_pem: Optional[bytes]
    key_password: Optional[str]
    check_hostname: bool


def tls_material(props: Mapping[str, str], source: str) -> TlsMaterial:
    """The TLS material of client properties read from ``source`` (one error line per bad value)."""
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", ""):
        raise KQuotaError(f"{source}: ssl.endpoint.identification.algorithm: expected https or empty, "
                          f"got {algorithm!r}")
    identity, password = _identity(props, source)
    return TlsMaterial(_trust(props, source), identity, password, algorithm == "https")


_KEY_BLOCK = re.compile(rb"-----BEGIN ([A-Z ]*)PRIVATE KEY-----.*?-----END \1PRIVATE KEY-----\r?\n?", re.S)


def _sealed(identity: bytes, password: Optional[str]) -> tuple[bytes, Optional[str]]:
    """``identity`` (key and chain) with its key encrypted under a fresh random password held only
    in memory, and that password: what ``load_cert_chain`` reads may then be seen by no one.
    Without the ``cryptography`` package (PEM stores only) the key is passed as it was given."""
    try:
        from cryptography.hazmat.primitives.serialization import (
            BestAvailableEncryption,
            Encoding,
            PrivateFormat,
            load_pem_private_key,
        )
    except ImportError:
        return identity, password
    block = _KEY_BLOCK.search(identity)
    if block is None:
        return identity, password
    encrypted = b"ENCRYPTED" in block.group(0)  # PKCS#8 and traditional (Proc-Type) encryption
    key = load_pem_private_key(block.group(0), password.encode() if password and encrypted else None)
    fresh = secrets.token_urlsafe(32)
    sealed = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(fresh.encode()))
    return sealed + identity[:block.start()] + identity[block.end():], fresh


@contextlib.contextmanager
def _key_file(pem: bytes) -> Iterator[str]:
    """A path ``load_cert_chain`` (which reads files only) can open holding ``pem``: an anonymous
    in-memory file where the system has them (Linux), else a private temporary file removed at
    once (its key encrypted by :func:`_sealed`)."""
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
            pem, password = _sealed(material.identity_pem, material.key_password)
            with _key_file(pem) as path:
                ctx.load_cert_chain(path, password=password)
        except (ssl.SSLError, ValueError, TypeError) as e:
            raise KQuotaError(f"{source}: ssl.keystore: unusable key or certificate "
                              f"({getattr(e, 'reason', None) or e}); a wrong ssl.key.password?") from None
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
