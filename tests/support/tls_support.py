"""Certificates made by the tests, and a TLS server that only completes handshakes, for the TLS
tests. The broker the TLS tests use is Apache Kafka's own SSL and SASL_SSL listeners
with their certificates (``kafka_broker.KafkaBroker.tls``); these are for the rest.

- :func:`make_pki`: a CA and, signed by it, a server certificate for ``127.0.0.1``/``localhost``
  (SANs), clients ``CN=alice,OU=eng,O=kquota`` and ``CN=admin,OU=ops,O=kquota``, an expired and a
  not-yet-valid client, a client without a subject; a client from another CA. Every certificate
  is X.509 v3 (as rustls requires) and written as PEM (certificate, PKCS#8 key, encrypted PKCS#8
  key, a keystore file of key + chain) and PKCS12 with a password; the CA as a PEM and a PKCS12
  truststore. They serve the proxy's own client-facing listener and the certificates Kafka must
  not trust.
- :class:`HandshakeOnly`: Python's ssl module completing TLS handshakes with a certificate Kafka
  cannot be given cheaply (one for another host), for the proxy's verification of the broker.
- :class:`Stunnel` and :class:`TlsBroker` (Debian's ``stunnel4`` in front of tansu): only
  ``benches/bench_proxy_tls.py`` still uses them; no test does.
"""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from proxy_support import Tansu
from waiting import free_port, wait_port

#: The password of every PKCS12 store and encrypted key the fixtures write.
PASSWORD = "kquota-secret"

_DAY = datetime.timedelta(days=1)


def _name(**attrs: str) -> x509.Name:
    """A subject in DER order O, OU, CN (RFC 2253 prints it CN first)."""
    oids = {"O": NameOID.ORGANIZATION_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "CN": NameOID.COMMON_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in attrs.items()])


@dataclass
class Cert:
    """One certificate and its key, in every form the tests use."""

    name: str
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    cert_pem: Path
    key_pem: Path
    encrypted_key_pem: Path
    keystore_pem: Path  # key, certificate, CA: Kafka's PEM keystore file
    p12: Path  # PKCS12 with PASSWORD

    @property
    def der(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.DER)

    def pem_text(self) -> str:
        return self.cert_pem.read_text()

    def key_text(self) -> str:
        return self.key_pem.read_text()


class Authority:
    """A CA that signs certificates into a directory."""

    def __init__(self, directory: Path, name: str) -> None:
        self.dir = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = _name(O="kquota tests", CN=name)
        self.certificate = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY).not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256()))
        self.pem = directory / f"{name.replace(' ', '-')}.pem"
        self.pem.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))
        self.p12 = directory / f"{name.replace(' ', '-')}-trust.p12"
        self.p12.write_bytes(pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(self.certificate, b"ca")],
            serialization.BestAvailableEncryption(PASSWORD.encode())))

    def issue(self, name: str, subject: x509.Name, *, server: bool = False,
              hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
              not_before: Optional[datetime.datetime] = None,
              not_after: Optional[datetime.datetime] = None) -> Cert:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(self.certificate.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before or now - _DAY).not_valid_after(not_after or now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        sans: list[x509.GeneralName] = []
        if server:
            import ipaddress
            def san(host: str) -> x509.GeneralName:
                try:
                    return x509.IPAddress(ipaddress.ip_address(host))
                except ValueError:
                    return x509.DNSName(host)
            sans = [san(host) for host in hosts]
        elif len(subject) == 0:
            sans = [x509.DNSName(f"{name}.clients.kquota.test")]  # RFC 5280: no subject, SAN critical
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=len(subject) == 0)
        certificate = builder.sign(self.key, hashes.SHA256())
        return self._write(name, certificate, key)

    def _write(self, name: str, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Cert:
        pem = certificate.public_bytes(serialization.Encoding.PEM)
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        enc_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.BestAvailableEncryption(PASSWORD.encode()))
        paths = {kind: self.dir / f"{name}{suffix}" for kind, suffix in
                 (("cert", ".crt.pem"), ("key", ".key.pem"), ("enc", ".enc-key.pem"), ("ks", ".keystore.pem"),
                  ("p12", ".p12"))}
        paths["cert"].write_bytes(pem)
        paths["key"].write_bytes(key_pem)
        paths["enc"].write_bytes(enc_pem)
        paths["ks"].write_bytes(key_pem + pem + self.pem.read_bytes())
        paths["p12"].write_bytes(pkcs12.serialize_key_and_certificates(
            name.encode(), key, certificate, [self.certificate],
            serialization.BestAvailableEncryption(PASSWORD.encode())))
        return Cert(name, certificate, key, paths["cert"], paths["key"], paths["enc"], paths["ks"], paths["p12"])


@dataclass
class Pki:
    """Every certificate a TLS test needs (see the module docstring)."""

    dir: Path
    ca: Authority
    other_ca: Authority
    server: Cert
    alice: Cert
    admin: Cert
    stranger: Cert  # signed by other_ca
    expired: Cert
    not_yet_valid: Cert
    no_subject: Cert


def make_pki(directory: Optional[Path] = None) -> Pki:
    """Certificates in ``directory`` (a new temporary directory when None)."""
    d = Path(directory or tempfile.mkdtemp(prefix="kquota-tls-"))
    ca = Authority(d, "kquota test CA")
    other = Authority(d, "other CA")
    now = datetime.datetime.now(datetime.timezone.utc)
    return Pki(
        dir=d, ca=ca, other_ca=other,
        server=ca.issue("server", _name(O="kquota", CN="localhost"), server=True),
        alice=ca.issue("alice", _name(O="kquota", OU="eng", CN="alice")),
        admin=ca.issue("admin", _name(O="kquota", OU="ops", CN="admin")),
        stranger=other.issue("stranger", _name(O="elsewhere", CN="mallory")),
        expired=ca.issue("expired", _name(O="kquota", CN="expired"),
                         not_before=now - 10 * _DAY, not_after=now - _DAY),
        not_yet_valid=ca.issue("not-yet-valid", _name(O="kquota", CN="future"),
                               not_before=now + _DAY, not_after=now + 10 * _DAY),
        no_subject=ca.issue("no-subject", x509.Name([])),
    )


class HandshakeOnly:
    """A TLS server on a loopback port (Python's ssl module) that completes each handshake with
    ``cert``, reads what the client sends first and closes: no Kafka behind it. It stands in for a
    broker only where Apache Kafka cannot cheaply be given the certificate a test needs (one for
    another host: the shared broker's certificate cannot change under the other tests, and a second
    broker costs a minute) and the handshake is all the test looks at. ``handshakes``: per
    completed handshake, the first bytes the client sent (``b""`` if none within a second);
    ``refused``: handshakes that failed."""

    def __init__(self, cert: Cert) -> None:
        import socket
        import ssl
        import threading

        self._ssl, self._socket = ssl, socket
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert.cert_pem), str(cert.key_pem))
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.handshakes: list[bytes] = []
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                raw, _ = self.sock.accept()
            except self._socket.timeout:
                continue
            except OSError:
                return
            with raw:
                raw.settimeout(5)
                try:
                    tls = self.context.wrap_socket(raw, server_side=True)
                except (self._ssl.SSLError, OSError):
                    self.refused += 1
                    continue
                tls.settimeout(1)
                try:
                    first = tls.recv(64)
                except (self._ssl.SSLError, OSError):
                    first = b""
                self.handshakes.append(first)
                tls.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def stunnel() -> str:
    """Debian's stunnel4, which scripts/test.sh installs: missing under CI is a failure."""
    import pytest

    path = shutil.which("stunnel4") or shutil.which("stunnel")
    if path is None:
        (pytest.fail if os.environ.get("CI") else pytest.skip)("stunnel4 not installed (apt-get install stunnel4)")
    return path


class Stunnel:
    """Debian's stunnel4 accepting TLS on a loopback ``port`` and forwarding plaintext to
    ``connect_port`` (with ``client_ca``, mutual TLS: a client certificate signed by it;
    ``server``: its certificate, default ``pki.server``, for localhost and 127.0.0.1)."""

    def __init__(self, pki: Pki, connect_port: int, client_ca: Optional[Path] = None,
                 port: Optional[int] = None, server: Optional[Cert] = None) -> None:
        server = server or pki.server
        binary = stunnel()
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="kquota-stunnel-", dir=pki.dir))
        lines = [
            "foreground = yes", "pid =", "debug = 4", f"output = {self.dir / 'stunnel.log'}",
            "[kafka]", f"accept = 127.0.0.1:{self.port}", f"connect = 127.0.0.1:{connect_port}",
            f"cert = {server.cert_pem}", f"key = {server.key_pem}",
        ]
        if client_ca is not None:
            lines += [f"CAfile = {client_ca}", "verifyChain = yes", "requireCert = yes"]
        self.config = self.dir / "stunnel.conf"
        self.config.write_text("\n".join(lines) + "\n")
        self.proc = subprocess.Popen([binary, str(self.config)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        try:
            wait_port(self.port)
        except TimeoutError:
            self.stop()
            raise

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        path = self.dir / "stunnel.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class TlsBroker:
    """tansu behind stunnel: TLS on ``port`` (``address``), tansu advertising it. With
    ``client_ca`` stunnel requires a client certificate signed by it (mutual TLS); ``server``:
    its certificate (default ``pki.server``, for localhost and 127.0.0.1); ``backend(port)``: what
    stunnel fronts (an object with ``port`` and ``stop()``, advertising ``port``), tansu by default."""

    def __init__(self, pki: Pki, client_ca: Optional[Path] = None, server: Optional[Cert] = None,
                 backend=None) -> None:
        stunnel()  # skip (or fail under CI) before starting tansu
        self.port = free_port()
        self.tansu = (backend or (lambda port: Tansu(advertised_port=port)))(self.port)
        try:
            self.front = Stunnel(pki, self.tansu.port, client_ca, port=self.port, server=server)
        except BaseException:
            self.tansu.stop()
            raise
        self.dir, self.config, self.proc = self.front.dir, self.front.config, self.front.proc

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.front.log()

    def stop(self) -> None:
        self.front.stop()
        self.tansu.stop()


def ssl_client_config(pki: Pki, client: Optional[Cert] = None) -> dict[str, str]:
    """librdkafka (confluent-kafka) settings for ``security.protocol=SSL`` against the fixtures."""
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca.pem),
            "ssl.endpoint.identification.algorithm": "https"}
    if client is not None:
        conf["ssl.certificate.location"] = str(client.cert_pem)
        conf["ssl.key.location"] = str(client.key_pem)
    return conf




def make_tls_topic(address: str, conf: dict[str, str], partitions: int = 1) -> str:
    """A new topic created through ``address`` by confluent-kafka with ``conf`` (SSL settings)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "tls-" + uuid.uuid4().hex[:10]
    admin = AdminClient({"bootstrap.servers": address, **conf})  # kept alive until the result arrives
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(15)
    return topic


def roundtrip(address: str, conf: dict[str, str], topic: Optional[str] = None) -> list[tuple[bytes, bytes]]:
    """confluent-kafka with ``conf`` through ``address``: a new topic (or ``topic``, empty, one
    partition), 40 keyed messages of growing size produced and consumed back byte for byte
    (asserted; the consumer's group is ``g-<topic>``, assigned, not joined); the messages."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    topic = topic or make_tls_topic(address, conf)
    sent = [(f"k{i}".encode(), bytes([i % 256]) * (1 + 97 * i)) for i in range(40)]
    producer = Producer({"bootstrap.servers": address, "linger.ms": 5, **conf})
    for key, value in sent:
        producer.produce(topic, value=value, key=key)
    assert producer.flush(20) == 0
    # assign, not subscribe: no group coordination to wait for
    consumer = Consumer({"bootstrap.servers": address, "group.id": "g-" + topic,
                         "enable.auto.commit": False, **conf})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[tuple[bytes, bytes]] = []
    try:
        for _ in range(300):
            if len(got) == len(sent):
                break
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    assert got == sent
    return got


def tls_wire(address: tuple[str, int], pki: Pki, cert: Optional[Cert] = None):
    """A ``proxy_wire.Wire`` over TLS to ``address`` (trusting the test CA), with ``cert``."""
    import ssl

    from proxy_wire import Wire

    ctx = ssl.create_default_context(cafile=str(pki.ca.pem))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert_pem), str(cert.key_pem))
    w = Wire(address, client_id="tls-wire")
    w.sock = ctx.wrap_socket(w.sock, server_hostname="localhost")
    return w
