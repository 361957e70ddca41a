//! The PROXY protocol header (HAProxy's, versions 1 and 2, as HAProxy and the cloud load
//! balancers send it): the first bytes of a connection that a balancer opened on a client's
//! behalf, naming the client's address. A pure parser over the bytes read so far; the accept path
//! (`admission`, for peers in `trusted_sources` only) reads until [`parse`] stops answering
//! [`ProxyHeaderError::Incomplete`], at most [`MAX_HEADER_BYTES`], and closes the connection on
//! any other error.
//!
//! * v1 (text): `PROXY TCP4|TCP6 <src> <dst> <sport> <dport>\r\n`, or `PROXY UNKNOWN[...]\r\n`;
//!   at most 107 bytes with the CRLF; single spaces; addresses of the named family; ports decimal
//!   0..=65535 without leading zeros.
//! * v2 (binary): the 12-byte signature, version 2 and a command (LOCAL or PROXY), the family and
//!   transport, a big-endian length, then the addresses (AF_INET 12 bytes, AF_INET6 36, AF_UNIX
//!   216) and TLVs, which are skipped.
//!
//! A LOCAL command (the balancer's own health check), `UNKNOWN` (v1), and the UNSPEC or UNIX
//! families mean "no client address": the connection's own peer address stays in force, as the
//! specification asks of a receiver.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The v2 signature: `\r\n\r\n\0\r\nQUIT\n`.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The v1 prefix.
const V1_PREFIX: &[u8] = b"PROXY ";
/// The longest v1 line, CRLF included (the specification's 107).
pub const MAX_V1_BYTES: usize = 107;
/// The fixed part of a v2 header.
const V2_FIXED: usize = 16;
/// The longest header of either version (a v2 header's length field is 16 bits).
pub const MAX_HEADER_BYTES: usize = V2_FIXED + u16::MAX as usize;

/// What a header says about the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxiedAddress {
    /// The client's address and the address it connected to, as the balancer saw them.
    Proxied {
        source: SocketAddr,
        destination: SocketAddr,
    },
    /// No client address (v2 LOCAL, v1 UNKNOWN, UNSPEC or UNIX family): keep the peer's.
    Local,
}

/// A complete header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyHeader {
    /// 1 or 2.
    pub version: u8,
    pub address: ProxiedAddress,
    /// Bytes the header takes at the start of the stream; the Kafka bytes follow.
    pub length: usize,
}

/// Why bytes are not (yet) a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyHeaderError {
    /// Every byte so far fits a header: read more (at most [`MAX_HEADER_BYTES`] in all).
    Incomplete,
    /// The connection does not start with a PROXY protocol header at all.
    Missing,
    /// A header that breaks the specification (the reason says how).
    Invalid(String),
}

impl std::fmt::Display for ProxyHeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProxyHeaderError::Incomplete => f.write_str("PROXY protocol header incomplete"),
            ProxyHeaderError::Missing => f.write_str("no PROXY protocol header"),
            ProxyHeaderError::Invalid(why) => write!(f, "invalid PROXY protocol header: {why}"),
        }
    }
}

impl std::error::Error for ProxyHeaderError {}

fn invalid(why: impl Into<String>) -> ProxyHeaderError {
    ProxyHeaderError::Invalid(why.into())
}

/// Parses the header at the start of `buf` (see the module docs).
pub fn parse(buf: &[u8]) -> Result<ProxyHeader, ProxyHeaderError> {
    let n = buf.len().min(V2_SIGNATURE.len());
    if n > 0 && buf[..n] == V2_SIGNATURE[..n] {
        return if buf.len() < V2_SIGNATURE.len() {
            Err(ProxyHeaderError::Incomplete)
        } else {
            parse_v2(buf)
        };
    }
    let n = buf.len().min(V1_PREFIX.len());
    if n > 0 && buf[..n] == V1_PREFIX[..n] {
        return if buf.len() < V1_PREFIX.len() {
            Err(ProxyHeaderError::Incomplete)
        } else {
            parse_v1(buf)
        };
    }
    if buf.is_empty() {
        return Err(ProxyHeaderError::Incomplete);
    }
    Err(ProxyHeaderError::Missing)
}

fn parse_v1(buf: &[u8]) -> Result<ProxyHeader, ProxyHeaderError> {
    let window = &buf[..buf.len().min(MAX_V1_BYTES)];
    let Some(cr) = window.iter().position(|b| *b == b'\r') else {
        return if buf.len() >= MAX_V1_BYTES {
            Err(invalid(format!("v1 line longer than {MAX_V1_BYTES} bytes")))
        } else if window.contains(&b'\n') {
            Err(invalid("v1 line ends without CR"))
        } else {
            Err(ProxyHeaderError::Incomplete)
        };
    };
    // A LF before the first CR ends the line without CR, however the bytes were split: the
    // same header must not be refused on one TCP segmentation and accepted on another.
    if window[..cr].contains(&b'\n') {
        return Err(invalid("v1 line ends without CR"));
    }
    match window.get(cr + 1) {
        None if buf.len() < MAX_V1_BYTES => return Err(ProxyHeaderError::Incomplete),
        None => return Err(invalid(format!("v1 line longer than {MAX_V1_BYTES} bytes"))),
        Some(b'\n') => {}
        _ => return Err(invalid("v1 line: CR not followed by LF")),
    }
    let line = std::str::from_utf8(&buf[V1_PREFIX.len()..cr]).map_err(|_| invalid("v1 line is not ASCII"))?;
    let length = cr + 2;
    if let Some(rest) = line.strip_prefix("UNKNOWN") {
        if !rest.is_empty() && !rest.starts_with(' ') {
            return Err(invalid(format!("v1 protocol {line:?}")));
        }
        return Ok(ProxyHeader {
            version: 1,
            address: ProxiedAddress::Local,
            length,
        });
    }
    let fields: Vec<&str> = line.split(' ').collect();
    let [proto, src, dst, sport, dport] = fields[..] else {
        return Err(invalid(format!(
            "v1 line needs 5 fields after PROXY, got {:?}",
            line
        )));
    };
    let v6 = match proto {
        "TCP4" => false,
        "TCP6" => true,
        _ => {
            return Err(invalid(format!(
                "v1 protocol {proto:?} (expected TCP4, TCP6 or UNKNOWN)"
            )))
        }
    };
    let address = |text: &str| -> Result<IpAddr, ProxyHeaderError> {
        let ip = if v6 {
            text.parse::<Ipv6Addr>().map(IpAddr::V6)
        } else {
            text.parse::<Ipv4Addr>().map(IpAddr::V4)
        };
        ip.map_err(|_| invalid(format!("v1 address {text:?} is not {proto}")))
    };
    let source = SocketAddr::new(address(src)?, port(sport)?);
    let destination = SocketAddr::new(address(dst)?, port(dport)?);
    Ok(ProxyHeader {
        version: 1,
        address: ProxiedAddress::Proxied { source, destination },
        length,
    })
}

fn port(text: &str) -> Result<u16, ProxyHeaderError> {
    let ok = !text.is_empty()
        && text.len() <= 5
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    match text.parse::<u16>() {
        Ok(p) if ok => Ok(p),
        _ => Err(invalid(format!("v1 port {text:?}"))),
    }
}

fn parse_v2(buf: &[u8]) -> Result<ProxyHeader, ProxyHeaderError> {
    if buf.len() < V2_FIXED {
        return Err(ProxyHeaderError::Incomplete);
    }
    let (version, command) = (buf[12] >> 4, buf[12] & 0x0f);
    if version != 2 {
        return Err(invalid(format!("v2 signature with version {version}")));
    }
    let (family, transport) = (buf[13] >> 4, buf[13] & 0x0f);
    let length = V2_FIXED + u16::from_be_bytes([buf[14], buf[15]]) as usize;
    if buf.len() < length {
        return Err(ProxyHeaderError::Incomplete);
    }
    let body = &buf[V2_FIXED..length];
    let local = ProxyHeader {
        version: 2,
        address: ProxiedAddress::Local,
        length,
    };
    match command {
        0 => return Ok(local), // LOCAL: the balancer's own connection; the rest is ignored
        1 => {}
        _ => return Err(invalid(format!("v2 command {command}"))),
    }
    if transport > 2 || family > 3 {
        return Err(invalid(format!("v2 family/transport byte {:#04x}", buf[13])));
    }
    let needed = match family {
        1 => 12,
        2 => 36,
        3 => 216,
        _ => 0,
    };
    if body.len() < needed {
        return Err(invalid(format!(
            "v2 length {} is shorter than its addresses ({needed})",
            body.len()
        )));
    }
    if family == 0 || family == 3 || transport == 0 {
        return Ok(local); // UNSPEC or UNIX: no IP address to take
    }
    if transport != 1 {
        return Err(invalid("v2 DGRAM transport on a stream connection"));
    }
    let be16 = |i: usize| u16::from_be_bytes([body[i], body[i + 1]]);
    let (source, destination) = if family == 1 {
        let ip = |i: usize| IpAddr::V4(Ipv4Addr::new(body[i], body[i + 1], body[i + 2], body[i + 3]));
        (SocketAddr::new(ip(0), be16(8)), SocketAddr::new(ip(4), be16(10)))
    } else {
        let ip = |i: usize| {
            let mut o = [0u8; 16];
            o.copy_from_slice(&body[i..i + 16]);
            IpAddr::V6(Ipv6Addr::from(o))
        };
        (
            SocketAddr::new(ip(0), be16(32)),
            SocketAddr::new(ip(16), be16(34)),
        )
    };
    Ok(ProxyHeader {
        version: 2,
        address: ProxiedAddress::Proxied { source, destination },
        length,
    })
}

#[cfg(test)]
#[path = "proxy_protocol_tests.rs"]
mod tests;
