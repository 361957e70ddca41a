//! A certificate subject in RFC 2253 form, exactly as Java's `X500Principal.getName("RFC2253")`
//! prints it: Kafka's DefaultKafkaPrincipalBuilder hands that string to `ssl.principal.mapping.rules`,
//! so an operator's rules only match here if every byte is the same as on a Kafka broker.
//!
//! Java's rules (sun.security.x509.X500Name / RDN / AVA, checked against Java 17):
//! - RDNs in reverse DER order, joined by `,`; the values of a multi-valued RDN in DER order,
//!   joined by `+`;
//! - the attribute type by keyword only for the nine RFC 2253 keywords Java knows (CN, C, L, ST,
//!   O, OU, STREET, DC, UID), else the dotted OID;
//! - a dotted OID, or a value that is not a directory string, as `#` and the value's DER in
//!   lowercase hex;
//! - otherwise the value's bytes read as UTF-8 with `,=+<>#;"\` escaped by a backslash, NUL as `\00`, and
//!   leading and trailing spaces (and CRs) escaped.

use x509_parser::asn1_rs::{Any, Class, Tag, ToDer};
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::{AttributeTypeAndValue, X509Name};

/// Why a subject could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubjectError {
    /// The bytes are not an X.509 certificate.
    NotACertificate(String),
}

impl std::fmt::Display for SubjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubjectError::NotACertificate(why) => write!(f, "not an X.509 certificate: {why}"),
        }
    }
}

impl std::error::Error for SubjectError {}

/// The subject of a DER certificate in Java's RFC 2253 form (empty for an empty subject).
pub fn subject_rfc2253(certificate_der: &[u8]) -> Result<String, SubjectError> {
    let (_, cert) = X509Certificate::from_der(certificate_der)
        .map_err(|e| SubjectError::NotACertificate(e.to_string()))?;
    Ok(name_rfc2253(cert.subject()))
}

/// A parsed X.509 name in Java's RFC 2253 form.
pub fn name_rfc2253(name: &X509Name<'_>) -> String {
    let rdns: Vec<_> = name.iter().collect();
    let mut out = String::new();
    for (i, rdn) in rdns.iter().rev().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (j, ava) in rdn.iter().enumerate() {
            if j > 0 {
                out.push('+');
            }
            push_ava(&mut out, ava);
        }
    }
    out
}

/// The keywords Java prints in RFC 2253 form (AVAKeyword's RFC 2253-compliant entries).
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.9" => "STREET",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

fn push_ava(out: &mut String, ava: &AttributeTypeAndValue<'_>) {
    let oid = ava.attr_type().to_id_string();
    let value = ava.attr_value();
    match (keyword(&oid), directory_string(value)) {
        (Some(kw), Some(text)) => {
            out.push_str(kw);
            out.push('=');
            push_escaped(out, &text);
        }
        (kw, _) => {
            out.push_str(kw.unwrap_or(&oid));
            out.push_str("=#");
            push_hex(out, value);
        }
    }
}

/// The value as text when Java treats it as a string (AVA.isDerString, non-canonical): the
/// PrintableString, T61String, IA5String, GeneralString, BMPString and UTF8String types. Java
/// decodes every one of them as UTF-8 of the raw bytes (so a BMPString's zero bytes print as
/// `\00` and a malformed sequence as U+FFFD): checked against Java 17.
fn directory_string(value: &Any<'_>) -> Option<String> {
    if value.class() != Class::Universal || value.header.is_constructed() {
        return None;
    }
    match value.tag() {
        Tag::Utf8String
        | Tag::PrintableString
        | Tag::Ia5String
        | Tag::GeneralString
        | Tag::T61String
        | Tag::BmpString => Some(String::from_utf8_lossy(value.data).into_owned()),
        _ => None,
    }
}

fn push_hex(out: &mut String, value: &Any<'_>) {
    // The value's own DER (tag, length, contents), as Java's DerValue.toByteArray().
    let der = value.to_der_vec().unwrap_or_default();
    for b in der {
        out.push_str(&format!("{b:02x}"));
    }
}

/// AVA.toRFC2253String's escaping: the special characters anywhere, NUL as `\00`, then leading
/// and trailing spaces and CRs (of the already escaped text).
fn push_escaped(out: &mut String, text: &str) {
    const ESCAPEES: &str = ",=+<>#;\"\\";
    let mut escaped: Vec<char> = Vec::with_capacity(text.len());
    for c in text.chars() {
        if ESCAPEES.contains(c) {
            escaped.push('\\');
            escaped.push(c);
        } else if c == '\0' {
            escaped.extend(['\\', '0', '0']);
        } else {
            escaped.push(c);
        }
    }
    let blank = |c: &char| *c == ' ' || *c == '\r';
    let lead = escaped.iter().position(|c| !blank(c)).unwrap_or(escaped.len());
    let trail = escaped.iter().rposition(|c| !blank(c));
    for (i, c) in escaped.iter().enumerate() {
        if i < lead || trail.is_none_or(|t| i > t) {
            out.push('\\');
        }
        out.push(*c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str) -> String {
        let mut out = String::new();
        push_escaped(&mut out, text);
        out
    }

    /// A self-signed certificate whose subject is the one attribute given.
    fn subject_of(ty: rcgen::DnType, value: rcgen::DnValue) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(ty, value);
        let key = rcgen::KeyPair::generate().unwrap();
        subject_rfc2253(params.self_signed(&key).unwrap().der()).unwrap()
    }

    #[test]
    fn subjects_as_java_17_prints_them() {
        use rcgen::{DnType, DnValue};
        // Each expected string is what X500Principal.getName("RFC2253") printed for the same
        // attribute (tests/proxy/test_tls_settings.py holds the multi-attribute cases).
        let cn = subject_of(
            DnType::CommonName,
            DnValue::Utf8String(" #lead+plus\"q\\b<a>;semi=eq trail ".into()),
        );
        assert_eq!(cn, "CN=\\ \\#lead\\+plus\\\"q\\\\b\\<a\\>\\;semi\\=eq trail\\ ");
        let email = DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]);
        let ia5 = DnValue::Ia5String("bob@example.com".try_into().unwrap());
        assert_eq!(
            subject_of(email, ia5),
            "1.2.840.113549.1.9.1=#160f626f62406578616d706c652e636f6d"
        );
        let bmp = DnValue::BmpString("bmp\u{e9}".try_into().unwrap());
        assert_eq!(
            subject_of(DnType::OrganizationalUnitName, bmp),
            "OU=\\00b\\00m\\00p\\00\u{fffd}"
        );
        let dc = DnType::CustomDnType(vec![0, 9, 2342, 19200300, 100, 1, 25]);
        assert_eq!(
            subject_of(dc, DnValue::Ia5String("com".try_into().unwrap())),
            "DC=com"
        );
        let custom = DnType::CustomDnType(vec![1, 2, 3, 4, 5]);
        assert_eq!(
            subject_of(custom, DnValue::Utf8String("x".into())),
            "1.2.3.4.5=#0c0178"
        );
    }

    #[test]
    fn escapes_as_java() {
        assert_eq!(escaped("alice"), "alice");
        assert_eq!(escaped("Tkac, Adam"), "Tkac\\, Adam");
        assert_eq!(
            escaped("a+b=c<d>e;f\"g\\h#i"),
            "a\\+b\\=c\\<d\\>e\\;f\\\"g\\\\h\\#i"
        );
        assert_eq!(escaped(" lead"), "\\ lead");
        assert_eq!(escaped("trail  "), "trail\\ \\ ");
        assert_eq!(escaped("#x"), "\\#x");
        assert_eq!(escaped("nul\0"), "nul\\00");
        assert_eq!(escaped("   "), "\\ \\ \\ ");
        assert_eq!(escaped("under_score@host*"), "under_score@host*");
    }
}
