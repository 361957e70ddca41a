//! Tests of `proxy_protocol`: the specification's examples (haproxy.org/download/2.9/doc/
//! proxy-protocol.txt), what HAProxy and the cloud balancers send, and every way a header can be
//! malformed, truncated or missing.

use super::*;

fn sa(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

fn proxied(h: &ProxyHeader) -> (SocketAddr, SocketAddr) {
    match h.address {
        ProxiedAddress::Proxied { source, destination } => (source, destination),
        ProxiedAddress::Local => panic!("expected an address: {h:?}"),
    }
}

fn v2(command: u8, fam: u8, body: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.push(0x20 | command);
    out.push(fam);
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn inet_body(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let mut b = src.to_vec();
    b.extend_from_slice(&dst);
    b.extend_from_slice(&sport.to_be_bytes());
    b.extend_from_slice(&dport.to_be_bytes());
    b
}

fn invalid_msg(buf: &[u8]) -> String {
    match parse(buf) {
        Err(ProxyHeaderError::Invalid(why)) => why,
        other => panic!("expected Invalid for {buf:?}, got {other:?}"),
    }
}

#[test]
fn v1_tcp4_and_tcp6() {
    let mut buf = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n".to_vec();
    let header_len = buf.len();
    buf.extend_from_slice(b"\x00\x00\x00\x10kafka bytes");
    let h = parse(&buf).unwrap();
    assert_eq!((h.version, h.length), (1, header_len));
    assert_eq!(proxied(&h), (sa("192.168.0.1:56324"), sa("192.168.0.11:443")));
    let h = parse(b"PROXY TCP6 2001:db8::1 ::1 65535 0\r\n").unwrap();
    assert_eq!(proxied(&h), (sa("[2001:db8::1]:65535"), sa("[::1]:0")));
}

#[test]
fn v1_unknown_keeps_the_peer_address() {
    for line in [
        &b"PROXY UNKNOWN\r\n"[..],
        b"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n",
    ] {
        let h = parse(line).unwrap();
        assert_eq!(
            (h.version, h.address, h.length),
            (1, ProxiedAddress::Local, line.len())
        );
    }
}

#[test]
fn v1_longest_line_is_accepted_and_longer_refused() {
    let line = b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    assert_eq!(line.len(), 104); // within the 107 bytes
    assert_eq!(parse(line).unwrap().length, 104);
    let mut long = b"PROXY UNKNOWN ".to_vec();
    long.resize(MAX_V1_BYTES + 3, b'x');
    assert!(invalid_msg(&long).contains("longer than 107"));
    let mut crlf_past_107 = b"PROXY UNKNOWN ".to_vec();
    crlf_past_107.resize(MAX_V1_BYTES - 1, b'x');
    crlf_past_107.extend_from_slice(b"\r\n");
    assert!(invalid_msg(&crlf_past_107).contains("longer than 107"));
}

#[test]
fn v1_truncated_is_incomplete_at_every_cut() {
    let line = b"PROXY TCP4 10.0.0.1 10.0.0.2 1234 9092\r\n";
    for cut in 0..line.len() {
        assert_eq!(
            parse(&line[..cut]),
            Err(ProxyHeaderError::Incomplete),
            "cut at {cut}"
        );
    }
}

#[test]
fn v1_malformed_lines_are_refused() {
    for (line, why) in [
        (&b"PROXY TCP4 10.0.0.1 10.0.0.2 1234\r\n"[..], "5 fields"),
        (b"PROXY TCP4 10.0.0.1  10.0.0.2 1234 9092\r\n", "5 fields"),
        (b"PROXY TCP5 10.0.0.1 10.0.0.2 1234 9092\r\n", "protocol"),
        (b"PROXY tcp4 10.0.0.1 10.0.0.2 1234 9092\r\n", "protocol"),
        (b"PROXY TCP4 ::1 10.0.0.2 1234 9092\r\n", "is not TCP4"),
        (b"PROXY TCP6 10.0.0.1 ::1 1234 9092\r\n", "is not TCP6"),
        (b"PROXY TCP4 10.0.0.1 10.0.0.2 65536 9092\r\n", "port"),
        (b"PROXY TCP4 10.0.0.1 10.0.0.2 01234 9092\r\n", "port"),
        (b"PROXY TCP4 10.0.0.1 10.0.0.2 +123 9092\r\n", "port"),
        (b"PROXY TCP4 10.0.0.1 10.0.0.2 1234 9092\n", "without CR"),
        (b"PROXY TCP4 10.0.0.1 10.0.0.2 1234 9092\rX", "not followed by LF"),
        (b"PROXY UNKNOWNX\r\n", "protocol"),
        (b"PROXY TCP4 10.0.0.\xff 10.0.0.2 1234 9092\r\n", "ASCII"),
    ] {
        let msg = invalid_msg(line);
        assert!(msg.contains(why), "{:?}: {msg}", String::from_utf8_lossy(line));
    }
}

#[test]
fn v2_inet_inet6_and_tlvs() {
    let mut body = inet_body([203, 0, 113, 7], [10, 0, 0, 1], 40000, 9092);
    body.extend_from_slice(&[0x04, 0x00, 0x03, 1, 2, 3]); // a TLV (PP2_TYPE_NOOP), skipped
    let mut buf = v2(1, 0x11, &body);
    let len = buf.len();
    buf.extend_from_slice(b"kafka");
    let h = parse(&buf).unwrap();
    assert_eq!((h.version, h.length), (2, len));
    assert_eq!(proxied(&h), (sa("203.0.113.7:40000"), sa("10.0.0.1:9092")));
    let mut b6 = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7).octets().to_vec();
    b6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    b6.extend_from_slice(&1u16.to_be_bytes());
    b6.extend_from_slice(&2u16.to_be_bytes());
    let h = parse(&v2(1, 0x21, &b6)).unwrap();
    assert_eq!(proxied(&h), (sa("[2001:db8::7]:1"), sa("[::1]:2")));
}

#[test]
fn v2_local_unspec_and_unix_keep_the_peer_address() {
    // LOCAL (a health check): whatever follows is ignored.
    let h = parse(&v2(0, 0x00, &[])).unwrap();
    assert_eq!((h.address, h.length), (ProxiedAddress::Local, 16));
    assert_eq!(
        parse(&v2(0, 0x11, &inet_body([1, 2, 3, 4], [5, 6, 7, 8], 1, 2)))
            .unwrap()
            .address,
        ProxiedAddress::Local
    );
    assert_eq!(parse(&v2(1, 0x00, &[])).unwrap().address, ProxiedAddress::Local);
    assert_eq!(
        parse(&v2(1, 0x31, &[0u8; 216])).unwrap().address,
        ProxiedAddress::Local
    );
    assert_eq!(
        parse(&v2(1, 0x10, &[0u8; 12])).unwrap().address,
        ProxiedAddress::Local
    );
}

#[test]
fn v2_truncated_is_incomplete_at_every_cut() {
    let full = v2(1, 0x11, &inet_body([1, 2, 3, 4], [5, 6, 7, 8], 1, 2));
    for cut in 0..full.len() {
        assert_eq!(
            parse(&full[..cut]),
            Err(ProxyHeaderError::Incomplete),
            "cut at {cut}"
        );
    }
    assert!(parse(&full).is_ok());
}

#[test]
fn v2_malformed_headers_are_refused() {
    let good = inet_body([1, 2, 3, 4], [5, 6, 7, 8], 1, 2);
    let mut wrong_version = v2(1, 0x11, &good);
    wrong_version[12] = 0x11;
    assert!(invalid_msg(&wrong_version).contains("version 1"));
    assert!(invalid_msg(&v2(2, 0x11, &good)).contains("command 2"));
    assert!(invalid_msg(&v2(1, 0x41, &good)).contains("family"));
    assert!(invalid_msg(&v2(1, 0x13, &good)).contains("family"));
    assert!(invalid_msg(&v2(1, 0x12, &good)).contains("DGRAM"));
    assert!(invalid_msg(&v2(1, 0x11, &good[..8])).contains("shorter than its addresses"));
    assert!(invalid_msg(&v2(1, 0x21, &good)).contains("shorter than its addresses"));
}

#[test]
fn a_connection_without_a_header_is_told_apart_at_once() {
    // A Kafka request starts with its 4-byte size: neither signature's first byte.
    assert_eq!(parse(b"\x00\x00\x00\x2a\x00\x12"), Err(ProxyHeaderError::Missing));
    assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Err(ProxyHeaderError::Missing));
    assert_eq!(parse(b"PROXX"), Err(ProxyHeaderError::Missing));
    assert_eq!(parse(b"\r\n\r\n\x00\r\nQUIX"), Err(ProxyHeaderError::Missing));
    assert_eq!(parse(b""), Err(ProxyHeaderError::Incomplete));
    assert_eq!(ProxyHeaderError::Missing.to_string(), "no PROXY protocol header");
}

#[test]
fn the_longest_header_fits_the_bound() {
    let body = vec![0u8; u16::MAX as usize];
    let buf = v2(1, 0x11, &body);
    assert_eq!(buf.len(), MAX_HEADER_BYTES);
    assert_eq!(parse(&buf).unwrap().length, MAX_HEADER_BYTES);
}

#[test]
fn a_lf_before_the_cr_is_refused_however_the_line_is_split() {
    // Found by the proxy_header fuzz target: whole, this line was accepted (its first CR comes
    // after a LF); cut before that CR, the same bytes were refused.
    let line = b"PROXY UNKNOWN ff:1 ffff::2 1PROXY TCP6\n\r\n";
    for cut in (line.iter().position(|b| *b == b'\n').unwrap() + 1)..=line.len() {
        assert_eq!(invalid_msg(&line[..cut]), "v1 line ends without CR", "cut at {cut}");
    }
}
