//! Kafka's `Sanitizer.sanitize`: the user tag and ZooKeeper node name of a principal.

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

#[cfg(test)]
mod tests {
    use super::sanitize;

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
