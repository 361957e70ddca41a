//! Kafka's `Sanitizer`: `sanitize`, the user tag and ZooKeeper node name of a principal, and
//! `desanitize`, the name back from a node name.

use crate::error::QuotaError;

/// Java `URLEncoder.encode(name, "UTF-8")` followed by `*` -> `%2A` and `+` -> `%20`.
///
/// Letters, digits and `. - _` stay; every other byte of the UTF-8 encoding becomes `%XX`
/// (upper-case hex). A space therefore becomes `%20` and `*` becomes `%2A`.
pub fn sanitize(name: &str) -> String {
    if !needs_escaping(name) {
        return name.to_owned();
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(name.len() * 3);
    for &b in name.as_bytes() {
        if is_kept(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xF) as usize] as char);
        }
    }
    out
}

/// True when `sanitize(name) != name`; lets the slow path skip an allocation for plain names.
#[inline]
pub fn needs_escaping(name: &str) -> bool {
    !name.bytes().all(is_kept)
}

#[inline]
fn is_kept(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_')
}

/// Kafka's `Sanitizer.desanitize`, Java's `URLDecoder.decode(name, "UTF-8")`: `+` is a space;
/// each run of `%XX` escapes is one byte sequence decoded as UTF-8, malformed bytes becoming
/// U+FFFD; every other character stays. `XX` is read by `Integer.parseInt(.., 16)`, so a sign
/// may take the first place (`%+F` is byte 0x0F, `%-0` byte 0) and a negative value is an error,
/// as is a `%` without two characters after it. Java's parseInt also takes non-ASCII Unicode
/// digits there; no sanitizer writes them, and they are refused here.
pub fn desanitize(name: &str) -> Result<String, QuotaError> {
    if !name.bytes().any(|b| b == b'%' || b == b'+') {
        return Ok(name.to_owned());
    }
    let s = name.as_bytes();
    let mut out = String::with_capacity(name.len());
    let mut run = Vec::new();
    let (mut i, mut kept) = (0, 0);
    while i < s.len() {
        match s[i] {
            b'+' => {
                out.push_str(&name[kept..i]);
                out.push(' ');
                i += 1;
                kept = i;
            }
            b'%' => {
                out.push_str(&name[kept..i]);
                run.clear();
                while i + 2 < s.len() && s[i] == b'%' {
                    run.push(escape_byte(name, s[i + 1], s[i + 2])?);
                    i += 3;
                }
                if i < s.len() && s[i] == b'%' {
                    return Err(bad_name(name, "incomplete '%' escape"));
                }
                out.push_str(&String::from_utf8_lossy(&run));
                kept = i;
            }
            _ => i += 1,
        }
    }
    out.push_str(&name[kept..]);
    Ok(out)
}

/// The byte of one escape's two characters, as Java's `Integer.parseInt(.., 16)` reads them.
fn escape_byte(name: &str, a: u8, b: u8) -> Result<u8, QuotaError> {
    let digit = |c: u8| (c as char).to_digit(16).filter(|_| c.is_ascii());
    let value = match a {
        b'+' => digit(b).map(|d| d as i32),
        b'-' => digit(b).map(|d| -(d as i32)),
        _ => digit(a).zip(digit(b)).map(|(h, l)| (h * 16 + l) as i32),
    };
    match value {
        Some(v) if v >= 0 => Ok(v as u8),
        Some(_) => Err(bad_name(name, "a negative '%' escape")),
        None => Err(bad_name(name, "illegal hex characters in a '%' escape")),
    }
}

#[cold]
fn bad_name(name: &str, why: &str) -> QuotaError {
    QuotaError::InvalidValue(format!("invalid URL-encoded name {name:?}: {why}"))
}

#[cfg(test)]
mod tests {
    use super::{desanitize, sanitize};

    #[test]
    fn desanitize_is_javas_url_decoder() {
        for name in [
            "alice",
            "user 1",
            "a*b+c",
            "~<default>",
            "CN=a,O=b",
            "é€😀",
            "",
            "%",
            "a%2",
        ] {
            assert_eq!(desanitize(&sanitize(name)).unwrap(), name);
        }
        assert_eq!(desanitize("a+b").unwrap(), "a b");
        assert_eq!(desanitize("%c3%a9").unwrap(), "é"); // lower-case hex too
        assert_eq!(desanitize("%C3x").unwrap(), "\u{FFFD}x"); // one run, decoded alone
        assert_eq!(desanitize("%FF%FE").unwrap(), "\u{FFFD}\u{FFFD}");
        assert_eq!(desanitize("%+F").unwrap(), "\u{F}"); // Integer.parseInt("+F", 16)
        assert_eq!(desanitize("%-0").unwrap(), "\0");
        assert_eq!(desanitize("é+").unwrap(), "é ");
        for bad in ["%", "%2", "a%", "%-1", "%G0", "%2G", "%%41", "%é"] {
            assert!(desanitize(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn matches_kafka_sanitizer() {
        assert_eq!(sanitize("alice"), "alice");
        assert_eq!(sanitize("a.b-c_d"), "a.b-c_d");
        assert_eq!(sanitize("user 1"), "user%201");
        assert_eq!(sanitize("a*b"), "a%2Ab");
        assert_eq!(sanitize("a+b"), "a%2Bb");
        assert_eq!(sanitize("~"), "%7E");
        assert_eq!(sanitize("<default>"), "%3Cdefault%3E");
        assert_eq!(sanitize("CN=a,O=b"), "CN%3Da%2CO%3Db");
        assert_eq!(sanitize("é"), "%C3%A9");
        assert_eq!(sanitize("😀"), "%F0%9F%98%80");
        assert_eq!(sanitize(""), "");
    }
}
