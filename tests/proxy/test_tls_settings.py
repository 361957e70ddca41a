"""TLS settings of kquota proxy: Kafka's listener form, properties files,
the native configuration builders through the binding (every fixture format, one-line errors that
name the property and the file), Kafka's principal mapping and Java's RFC 2253 subjects."""

from __future__ import annotations

import datetime
import shutil
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID, ObjectIdentifier

from kquota._kquota import SslPrincipalMapper, certificate_subject, check_listener_tls, check_upstream_tls
from kquota.exceptions import KQuotaError, QuotaConfigError, QuotaValueError
from kquota.kafka.java_properties import load_properties, parse_properties
from kquota.proxy.tls_settings import (
    Listener, listener_tls, parse_listener, principal_mapper, unknown_ssl_properties, upstream_security,
)
from tls_support import PASSWORD


# ---------------------------------------------------------------- listener form


@pytest.mark.parametrize("text,expected", [
    ("127.0.0.1:9092", Listener("PLAINTEXT", "127.0.0.1", 9092)),
    ("SSL://localhost:9093", Listener("SSL", "localhost", 9093)),
    ("sasl_ssl://broker.example:9094", Listener("SASL_SSL", "broker.example", 9094)),
    ("SASL_PLAINTEXT://127.0.0.1:0", Listener("SASL_PLAINTEXT", "127.0.0.1", 0)),
    ("SSL://[::1]:9092", Listener("SSL", "::1", 9092)),
    ("[::1]:9092", Listener("PLAINTEXT", "::1", 9092)),
])
def test_parse_listener(text, expected):
    got = parse_listener(text)
    assert got == expected
    assert got.tls == (expected.protocol in ("SSL", "SASL_SSL"))
    assert got.sasl == expected.protocol.startswith("SASL_")
    assert parse_listener(str(got)) == got


@pytest.mark.parametrize("text,needle", [
    ("TLS://127.0.0.1:9093", "unknown security protocol 'TLS'"),
    ("SSL://:9093", "HOST:PORT"),
    ("SSL://host", "HOST:PORT"),
    ("host:99999", "HOST:PORT"),
    ("::1:9092", "brackets"),
    ("SSL://[::1:9092", "HOST:PORT"),
])
def test_parse_listener_errors_are_one_line_naming_the_option(text, needle):
    with pytest.raises(KQuotaError) as e:
        parse_listener(text, "--bootstrap-server")
    assert needle in str(e.value) and str(e.value).startswith("--bootstrap-server")
    assert "\n" not in str(e.value)


# ---------------------------------------------------------------- properties files


def test_java_properties_syntax():
    text = (
        "# comment\n! also a comment\n  a = 1\nb:2\nc 3\nempty\n"
        "pem=-----BEGIN CERTIFICATE----- \\\n    MIIB \\\n    AAAA \\\n    -----END CERTIFICATE-----\n"
        "esc=tab\\there\\u0041\\=x\\\\\nkey\\ with\\:colon=v\n"
        "rules=RULE:^CN=(.*?),OU=eng.*$/$1/,\\\n  DEFAULT\n"
    )
    props = parse_properties(text)
    assert props == {
        "a": "1", "b": "2", "c": "3", "empty": "",
        "pem": "-----BEGIN CERTIFICATE----- MIIB AAAA -----END CERTIFICATE-----",
        "esc": "tab\thereA=x\\", "key with:colon": "v",
        "rules": "RULE:^CN=(.*?),OU=eng.*$/$1/,DEFAULT",
    }
    # Java's line ends only: a form feed inside a value stays; CRLF files read alike
    assert parse_properties("a=x\fy\r\nb=2\rc=3") == {"a": "x\fy", "b": "2", "c": "3"}
    with pytest.raises(KQuotaError, match=r"f.properties:1: malformed \\uxxxx"):
        parse_properties("k=\\u00zz", "f.properties")


def test_load_properties_missing_file_names_option_and_file(tmp_path):
    with pytest.raises(KQuotaError) as e:
        load_properties(str(tmp_path / "nope.properties"), "--broker-config")
    assert "--broker-config" in str(e.value) and "nope.properties" in str(e.value)


# ---------------------------------------------------------------- listener TLS from every format


def _formats(pki):
    s = pki.server
    return {
        "PEM keystore file": {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(s.keystore_pem)},
        "PEM keystore, type recognised": {"ssl.keystore.location": str(s.keystore_pem)},
        "PKCS12 with password": {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(s.p12),
                                 "ssl.keystore.password": PASSWORD},
        "inline PEM (KIP-651)": {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": s.pem_text(),
                                 "ssl.keystore.key": s.key_text()},
        "encrypted inline key": {"ssl.keystore.certificate.chain": s.pem_text(),
                                 "ssl.keystore.key": s.encrypted_key_pem.read_text(), "ssl.key.password": PASSWORD},
    }


@pytest.mark.parametrize("fmt", ["PEM keystore file", "PEM keystore, type recognised", "PKCS12 with password",
                                 "inline PEM (KIP-651)", "encrypted inline key"])
def test_listener_config_builds_from_each_format(pki, fmt):
    props = _formats(pki)[fmt]
    files = check_listener_tls(props)
    assert files == ([props["ssl.keystore.location"]] if "ssl.keystore.location" in props else [])


@pytest.mark.parametrize("auth", ["required", "requested"])
@pytest.mark.parametrize("trust", ["pem", "pkcs12", "inline"])
def test_listener_with_client_auth_and_each_truststore(pki, auth, trust):
    props = {"ssl.keystore.location": str(pki.server.keystore_pem), "ssl.client.auth": auth}
    props.update({
        "pem": {"ssl.truststore.location": str(pki.ca.pem)},
        "pkcs12": {"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(pki.ca.p12),
                   "ssl.truststore.password": PASSWORD},
        "inline": {"ssl.truststore.certificates": pki.ca.pem.read_text()},
    }[trust])
    files = check_listener_tls(props)
    assert files == [str(pki.server.keystore_pem)] + ([props["ssl.truststore.location"]]
                                                       if "ssl.truststore.location" in props else [])


def _error(props, check=check_listener_tls) -> str:
    with pytest.raises(QuotaConfigError) as e:
        check(props)
    text = str(e.value)
    assert "\n" not in text, text
    return text


def test_wrong_keystore_password_names_the_property_and_the_file(pki):
    text = _error({"ssl.keystore.location": str(pki.server.p12), "ssl.keystore.password": "wrong"})
    assert text.startswith("ssl.keystore.password: ") and str(pki.server.p12) in text and "wrong password" in text
    text = _error({"ssl.keystore.location": str(pki.server.p12)})
    assert text.startswith("ssl.keystore.password: ") and "needs a password" in text


def test_wrong_or_missing_key_password(pki):
    props = {"ssl.keystore.certificate.chain": pki.server.pem_text(),
             "ssl.keystore.key": pki.server.encrypted_key_pem.read_text()}
    assert _error(props).startswith("ssl.key.password: ")
    assert "wrong password" in _error({**props, "ssl.key.password": "nope"})


def test_missing_file(pki, tmp_path):
    missing = tmp_path / "missing.p12"
    text = _error({"ssl.keystore.location": str(missing), "ssl.keystore.password": PASSWORD})
    assert text.startswith("ssl.keystore.location: ") and str(missing) in text
    text = _error({"ssl.keystore.location": str(pki.server.keystore_pem), "ssl.client.auth": "required",
                   "ssl.truststore.location": str(tmp_path / "ca.pem")})
    assert text.startswith("ssl.truststore.location: ") and "ca.pem" in text


def _jks(pki, tmp_path):
    """A real JKS keystore when keytool is here, else a file with JKS's magic number."""
    path = tmp_path / "ks.jks"
    keytool = shutil.which("keytool")
    if keytool:
        subprocess.run([keytool, "-importkeystore", "-noprompt", "-srckeystore", str(pki.server.p12),
                        "-srcstoretype", "PKCS12", "-srcstorepass", PASSWORD, "-destkeystore", str(path),
                        "-deststoretype", "JKS", "-deststorepass", PASSWORD], check=True, capture_output=True)
    else:
        path.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + b"\x00" * 32)
    return path


@pytest.mark.process
def test_jks_is_refused_with_the_conversion_command(pki, tmp_path):
    jks = _jks(pki, tmp_path)
    for props, prop in (({"ssl.keystore.location": str(jks), "ssl.keystore.password": PASSWORD}, "ssl.keystore.location"),
                        ({"ssl.keystore.type": "JKS", "ssl.keystore.location": str(jks)}, "ssl.keystore.type")):
        text = _error(props)
        assert text.startswith(prop + ": ")
        assert f"keytool -importkeystore -srckeystore {jks} -destkeystore ks.p12 -deststoretype PKCS12" in text


@pytest.mark.parametrize("props,prop", [
    ({"ssl.keystore.type": "PEM"}, "ssl.keystore.location"),
    ({"ssl.client.auth": "always"}, "ssl.client.auth"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
    ({"ssl.enabled.protocols": "SSLv3,TLSv1.2"}, "ssl.enabled.protocols"),
    ({"ssl.cipher.suites": "TLS_RSA_WITH_AES_128_CBC_SHA"}, "ssl.cipher.suites"),
    ({"ssl.keystore.type": "BKS"}, "ssl.keystore.type"),
])
def test_policy_errors(pki, props, prop):
    # (the first case has no keystore at all)
    base = {} if props == {"ssl.keystore.type": "PEM"} else {"ssl.keystore.location": str(pki.server.keystore_pem)}
    assert _error({**base, **props}).startswith(prop + ": ")


def test_protocols_and_suites_in_kafka_names(pki):
    base = {"ssl.keystore.location": str(pki.server.keystore_pem)}
    check_listener_tls({**base, "ssl.enabled.protocols": "TLSv1.2,TLSv1.3"})
    check_listener_tls({**base, "ssl.enabled.protocols": "TLSv1.3", "ssl.cipher.suites": "TLS_AES_256_GCM_SHA384"})
    check_listener_tls({**base, "ssl.enabled.protocols": "TLSv1.2",
                        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"})


# ---------------------------------------------------------------- from config files


def test_listener_tls_from_a_config_file_with_listener_overrides(pki, tmp_path):
    conf = tmp_path / "proxy.properties"
    conf.write_text(
        f"ssl.keystore.location={pki.server.p12}\nssl.keystore.password=wrong\n"
        f"listener.name.ssl.ssl.keystore.password={PASSWORD}\n"
        f"ssl.client.auth=required\nssl.truststore.location={pki.ca.pem}\n"
        "ssl.principal.mapping.rules=RULE:^CN=(.*?),OU=eng,.*$/$1/,\\\n    DEFAULT\n"
        "ssl.keystore.bogus=1\n")
    props = load_properties(str(conf))
    settings = listener_tls(props, str(conf), parse_listener("SSL://127.0.0.1:9093"))
    assert settings.properties["ssl.keystore.password"] == PASSWORD
    assert set(settings.watched_files) == {str(pki.server.p12), str(pki.ca.pem)}
    assert principal_mapper(settings).principal(pki.alice.der) == "alice"
    assert principal_mapper(settings).principal(pki.admin.der) == "CN=admin,OU=ops,O=kquota"
    assert unknown_ssl_properties(props, tuple(settings.properties)) == [
        "ssl.keystore.bogus"]
    # SASL_SSL takes its own overrides; the file is named first in an error
    with pytest.raises(KQuotaError) as e:
        listener_tls(props, str(conf), parse_listener("SASL_SSL://127.0.0.1:9094"))
    assert str(e.value).startswith(f"{conf}: ssl.keystore.password: wrong password")
    with pytest.raises(KQuotaError, match="not a TLS listener"):
        listener_tls(props, str(conf), parse_listener("127.0.0.1:9092"))


def test_bad_mapping_rules_refuse_to_start(pki, tmp_path):
    props = {"ssl.keystore.location": str(pki.server.keystore_pem), "ssl.principal.mapping.rules": "RULE:^CN=(.*)/$1"}
    with pytest.raises(KQuotaError) as e:
        listener_tls(props, "proxy.properties", parse_listener("SSL://127.0.0.1:1"))
    assert str(e.value).startswith("proxy.properties: ssl.principal.mapping.rules: Invalid rule")


def test_upstream_security(pki, tmp_path):
    ssl_props = {"security.protocol": "SSL", "ssl.truststore.location": str(pki.ca.pem),
                 "ssl.keystore.location": str(pki.alice.p12), "ssl.keystore.password": PASSWORD,
                 "sasl.mechanism": "PLAIN", "client.id": "x"}
    up = upstream_security(ssl_props, "broker.properties", parse_listener("127.0.0.1:9093"))
    assert up.protocol == "SSL" and up.tls is not None and "client.id" not in up.tls
    assert up.sasl == {"sasl.mechanism": "PLAIN"}
    assert set(up.watched_files) == {str(pki.ca.pem), str(pki.alice.p12)}
    # the scheme alone, no file
    up = upstream_security({"ssl.truststore.location": str(pki.ca.pem)}, "-", parse_listener("SASL_SSL://h:1"))
    assert up.protocol == "SASL_SSL" and up.tls == {"ssl.truststore.location": str(pki.ca.pem)}
    assert upstream_security({}, "-", parse_listener("h:1")).tls is None
    # errors: contradiction, unknown protocol, endpoint identification, a bad store
    with pytest.raises(KQuotaError, match="contradicts --bootstrap-server SSL://h:1"):
        upstream_security({"security.protocol": "SASL_SSL"}, "b.properties", parse_listener("SSL://h:1"))
    with pytest.raises(KQuotaError, match=r"^b.properties: security.protocol: invalid value 'TLS'"):
        upstream_security({"security.protocol": "TLS"}, "b.properties", parse_listener("h:1"))
    with pytest.raises(KQuotaError, match=r"^b.properties: ssl.endpoint.identification.algorithm: "):
        upstream_security({**ssl_props, "ssl.endpoint.identification.algorithm": "ldaps"}, "b.properties",
                          parse_listener("h:1"))
    with pytest.raises(KQuotaError, match=r"^b.properties: ssl.keystore.password: wrong password"):
        upstream_security({**ssl_props, "ssl.keystore.password": "nope"}, "b.properties", parse_listener("h:1"))
    check_upstream_tls({"ssl.truststore.location": str(pki.ca.pem), "ssl.endpoint.identification.algorithm": ""})


# ---------------------------------------------------------------- principals


def test_principal_mapper_through_the_binding(pki):
    rules = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/U"
    m = SslPrincipalMapper(rules)
    assert str(m) == f"SslPrincipalMapper(rules = [{rules}])"
    assert m.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert m.principal(pki.alice.der) == "ALICE@ENG"
    assert m.principal(None) == "ANONYMOUS"
    with pytest.raises(QuotaValueError, match="No rules apply to OU=x"):
        m.name("OU=x")
    with pytest.raises(QuotaValueError, match="empty subject"):
        SslPrincipalMapper().principal(pki.no_subject.der)
    with pytest.raises(QuotaConfigError, match="ssl.principal.mapping.rules: Invalid rule"):
        SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U")
    assert SslPrincipalMapper().principal(pki.expired.der) == "CN=expired,O=kquota"


def _cert(subject: x509.Name, san: bool = False) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject)
         .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ca")]))
         .public_key(key.public_key()).serial_number(1).not_valid_before(now)
         .not_valid_after(now + datetime.timedelta(days=1)))
    if san:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("x.example")]), critical=True)
    return b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


A, R = x509.NameAttribute, x509.RelativeDistinguishedName

#: Subjects and what Java 17's X500Principal.getName("RFC2253") printed for these certificates
#: (checked with a small Java program reading the same DER): the string Kafka maps.
JAVA_RFC2253 = [
    (x509.Name([A(NameOID.COUNTRY_NAME, "US"), A(NameOID.ORGANIZATION_NAME, "kquota"),
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"), A(NameOID.COMMON_NAME, "alice")]),
     "CN=alice,OU=eng,O=kquota,C=US"),
    (x509.Name([A(NameOID.ORGANIZATION_NAME, "Acme, Inc."), A(NameOID.COMMON_NAME, ' #lead+plus"q\\b<a>;semi=eq trail ')]),
     'CN=\\ \\#lead\\+plus\\"q\\\\b\\<a\\>\\;semi\\=eq trail\\ ,O=Acme\\, Inc.'),
    (x509.Name([A(NameOID.COMMON_NAME, "bob"), A(NameOID.EMAIL_ADDRESS, "bob@example.com"),
                A(NameOID.SERIAL_NUMBER, "1234"), A(NameOID.TITLE, "Dr")]),
     "2.5.4.12=#0c024472,2.5.4.5=#130431323334,1.2.840.113549.1.9.1=#160f626f62406578616d706c652e636f6d,CN=bob"),
    (x509.Name([A(NameOID.DOMAIN_COMPONENT, "com"), A(NameOID.DOMAIN_COMPONENT, "example"), A(NameOID.USER_ID, "u1"),
                A(NameOID.STREET_ADDRESS, "1 Main St"), A(NameOID.LOCALITY_NAME, "Paris"),
                A(NameOID.STATE_OR_PROVINCE_NAME, "IdF")]),
     "ST=IdF,L=Paris,STREET=1 Main St,UID=u1,DC=example,DC=com"),
    (x509.Name([R([A(NameOID.ORGANIZATION_NAME, "kquota")]),
                R([A(NameOID.COMMON_NAME, "carol"), A(NameOID.USER_ID, "c42")])]),
     "CN=carol+UID=c42,O=kquota"),
    (x509.Name([A(NameOID.ORGANIZATION_NAME, "printable", _ASN1Type.PrintableString),
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "bmp\u00e9", _ASN1Type.BMPString),
                A(NameOID.COMMON_NAME, "utf8 \u00fc\u4e2d", _ASN1Type.UTF8String),
                A(NameOID.LOCALITY_NAME, "ia5", _ASN1Type.IA5String)]),
     "L=ia5,CN=utf8 \u00fc\u4e2d,OU=\\00b\\00m\\00p\\00\ufffd,O=printable"),
    (x509.Name([A(ObjectIdentifier("1.2.3.4.5"), "x"), A(NameOID.COMMON_NAME, "dave")]), "CN=dave,1.2.3.4.5=#0c0178"),
]


@pytest.mark.parametrize("subject,java", JAVA_RFC2253, ids=[j[:24] for _, j in JAVA_RFC2253])
def test_subject_as_java_prints_it(subject, java):
    assert certificate_subject(_cert(subject)) == java


def test_subject_of_the_fixture_certificates(pki):
    assert certificate_subject(pki.alice.der) == "CN=alice,OU=eng,O=kquota"
    assert certificate_subject(pki.no_subject.der) == ""
    with pytest.raises(QuotaValueError, match="not an X.509 certificate"):
        certificate_subject(b"\x30\x03\x02\x01\x01")
