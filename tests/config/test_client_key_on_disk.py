"""No decrypted client key and no key password is ever written to disk by kquota's own TLS
connections (``kquota.kafka.client_security``): Python's ``ssl`` reads keys from files only, so what it
is given is an in-memory file (Linux) holding the key encrypted under a fresh random password, or,
where the system has no in-memory files, a private temporary file with that encrypted key,
removed at once. The attack: a local user (or a backup, or a crash dump of /tmp) reading the
client's PKCS12 key in the clear from a temporary file while the client is connected."""

from __future__ import annotations

import os
import socket
import ssl
import tempfile
import threading

import pytest
from tls_support import PASSWORD

from kquota.kafka.client_security import client_security

_CLEAR_KEYS = (b"-----BEGIN PRIVATE KEY-----", b"-----BEGIN RSA PRIVATE KEY-----", b"-----BEGIN EC PRIVATE KEY-----")


def _stores(pki):
    return {
        "PKCS12": {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.alice.p12),
                   "ssl.keystore.password": PASSWORD},
        "PEM file": {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.alice.keystore_pem)},
        "inline PEM": {"ssl.keystore.certificate.chain": pki.alice.pem_text(),
                       "ssl.keystore.key": pki.alice.key_text()},
        "encrypted PEM": {"ssl.keystore.certificate.chain": pki.alice.pem_text(),
                          "ssl.keystore.key": pki.alice.encrypted_key_pem.read_text(),
                          "ssl.key.password": PASSWORD},
    }


def _files_under(directory: str) -> dict[str, bytes]:
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[path] = f.read()
    return out


def _assert_sealed(content: bytes, what: str) -> None:
    for marker in _CLEAR_KEYS:
        assert marker not in content, f"{what}: a decrypted key ({marker.decode()})"
    assert PASSWORD.encode() not in content, f"{what}: the store password"
    assert b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in content, f"{what}: no encrypted key"


@pytest.fixture
def watched(monkeypatch, tmp_path):
    """Temporary files go to a directory of the test's; every file ``load_cert_chain`` is given
    is read at that moment, with the temporary directory's files."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    seen: list[tuple[str, str, bytes, dict[str, bytes]]] = []
    passwords: list[object] = []
    original = ssl.SSLContext.load_cert_chain

    def spy(self, certfile, keyfile=None, password=None):
        with open(certfile, "rb") as f:
            content = f.read()
        target = os.readlink(certfile) if os.path.islink(certfile) else certfile
        seen.append((str(certfile), target, content, _files_under(str(tmp))))
        passwords.append(password)
        return original(self, certfile, keyfile, password)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    return tmp, seen, passwords


def _mutual_tls_server(pki):
    """A TLS server requiring a client certificate; answers with the client's common name."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki.server.cert_pem), str(pki.server.key_pem))
    ctx.load_verify_locations(cafile=str(pki.ca.pem))
    ctx.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(30)
    release = threading.Event()

    def serve():
        with listener:
            conn, _ = listener.accept()
            with ctx.wrap_socket(conn, server_side=True) as tls:
                subject = dict(x[0] for x in tls.getpeercert()["subject"])
                tls.sendall(subject["commonName"].encode() + b"\n")
                release.wait(30)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], release, thread


@pytest.mark.parametrize("store", ["PKCS12", "PEM file", "inline PEM", "encrypted PEM"])
def test_no_decrypted_key_or_password_on_disk_while_connected(pki, watched, store):
    tmp, seen, _ = watched
    # The server's context loads its own files through the spy too: only the client's are checked.
    port, release, thread = _mutual_tls_server(pki)
    props = {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
             "ssl.truststore.location": str(pki.ca.pem), **_stores(pki)[store]}
    sec = client_security(props)
    client = [s for s in seen if s[0] != str(pki.server.cert_pem)]
    assert len(client) == 1
    path, target, content, temp_files = client[0]
    _assert_sealed(content, store)
    if hasattr(os, "memfd_create"):
        assert target.startswith("/memfd:"), f"{store}: the key went to {target}, not an in-memory file"
    assert temp_files == {}
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        with sec.ssl_context.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.recv(64) == b"alice\n"
            # Connected: nothing anywhere under the temporary directory.
            assert _files_under(str(tmp)) == {}
            release.set()
    thread.join(30)


def test_without_in_memory_files_the_temporary_file_holds_only_an_encrypted_key(pki, watched, monkeypatch):
    tmp, seen, _ = watched
    monkeypatch.delattr(os, "memfd_create", raising=False)
    sec = client_security({"security.protocol": "SSL", "ssl.keystore.type": "PKCS12",
                           "ssl.keystore.location": str(pki.alice.p12), "ssl.keystore.password": PASSWORD})
    assert sec.ssl_context is not None
    (path, _, content, temp_files), = seen
    assert os.path.dirname(path) == str(tmp)
    _assert_sealed(content, "temporary file")
    assert list(temp_files) == [path]
    _assert_sealed(temp_files[path], "temporary file")
    assert _files_under(str(tmp)) == {}


def test_each_context_seals_its_key_under_a_fresh_password(pki, watched):
    _, _, passwords = watched
    props = {"security.protocol": "SSL", **_stores(pki)["PKCS12"]}
    client_security(props)
    client_security(props)
    assert len(passwords) == 2 and None not in passwords
    assert PASSWORD not in passwords and passwords[0] != passwords[1]
