//! `kquota.proxy.protocol.trusted.sources`: the balancers whose PROXY protocol header is
//! believed. A header names any address its sender likes, so only the peers listed here (CIDR
//! blocks, IPv4 and IPv6) may speak for a client; every other peer of a listener taking the
//! PROXY protocol is closed before a byte of it is read.

use std::fmt;
use std::net::IpAddr;

use quota_core::ip_address::canonical_ip;

/// One CIDR block: an address and the number of leading bits that must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    /// `a.b.c.d/n` or `x::y/n`; a bare address is that one host. The bits beyond the prefix
    /// must be zero (`10.1.2.3/8` is refused: it is ambiguous whether a host or a net was meant).
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (addr, bits) = match text.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (text, None),
        };
        let net: IpAddr = addr
            .parse()
            .map_err(|_| format!("{text:?} is not an IPv4 or IPv6 CIDR block (e.g. 10.0.0.0/8, fd00::/8)"))?;
        let net = canonical_ip(net);
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => match b.parse::<u8>() {
                Ok(n) if n <= max && !b.starts_with('+') => n,
                _ => return Err(format!("{text:?}: prefix length {b:?} is not 0-{max}")),
            },
        };
        let cidr = Cidr { net, bits };
        if mask(&net, bits) != bits_of(&net) {
            return Err(format!(
                "{text:?}: address bits set beyond the /{bits} prefix (write the network address)"
            ));
        }
        Ok(cidr)
    }

    /// Whether `ip` (an IPv4-mapped IPv6 address counts as its IPv4 address) is inside.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        if ip.is_ipv4() != self.net.is_ipv4() {
            return false;
        }
        mask(&ip, self.bits) == bits_of(&self.net)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.bits)
    }
}

fn bits_of(ip: &IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(*v4) as u128,
        IpAddr::V6(v6) => u128::from(*v6),
    }
}

fn mask(ip: &IpAddr, bits: u8) -> u128 {
    let width = if ip.is_ipv4() { 32 } else { 128 };
    let value = bits_of(ip);
    if bits == 0 {
        return 0;
    }
    let shift = width - bits as u32;
    (value >> shift) << shift
}

/// The trusted balancers: empty means no peer's header is believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedSources {
    blocks: Vec<Cidr>,
}

impl TrustedSources {
    /// A comma-separated list of CIDR blocks (spaces around commas allowed; empty items are
    /// refused, so a stray comma is not read as "nothing more").
    pub fn parse(text: &str) -> Result<TrustedSources, String> {
        let mut blocks = Vec::new();
        for item in text.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(format!("{text:?}: an empty item (expected CIDR blocks separated by commas)"));
            }
            blocks.push(Cidr::parse(item)?);
        }
        Ok(TrustedSources { blocks })
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Whether a connection from `peer` may send a PROXY protocol header.
    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.blocks.iter().any(|b| b.contains(peer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn blocks_of_both_families_match_their_addresses_only() {
        let t = TrustedSources::parse("127.0.0.1/32, 10.0.0.0/8,fd00::/8,::1").unwrap();
        assert!(t.trusts(ip("127.0.0.1")));
        assert!(!t.trusts(ip("127.0.0.2")), "all of 127/8 is loopback: only the /32 is trusted");
        assert!(t.trusts(ip("10.255.1.2")) && !t.trusts(ip("11.0.0.1")));
        assert!(t.trusts(ip("fd12::1")) && !t.trusts(ip("fe80::1")));
        assert!(t.trusts(ip("::1")) && !t.trusts(ip("::2")));
        // An IPv4-mapped IPv6 peer is its IPv4 address (a dual-stack listener sees those).
        assert!(t.trusts(ip("::ffff:10.1.1.1")) && !t.trusts(ip("::ffff:12.1.1.1")));
    }

    #[test]
    fn zero_and_full_prefixes() {
        let all4 = TrustedSources::parse("0.0.0.0/0").unwrap();
        assert!(all4.trusts(ip("203.0.113.9")) && !all4.trusts(ip("2001:db8::1")));
        let all6 = TrustedSources::parse("::/0").unwrap();
        assert!(all6.trusts(ip("2001:db8::1")) && !all6.trusts(ip("203.0.113.9")));
        let host = TrustedSources::parse("192.0.2.7/32").unwrap();
        assert!(host.trusts(ip("192.0.2.7")) && !host.trusts(ip("192.0.2.6")));
        let odd = TrustedSources::parse("192.0.2.128/25").unwrap();
        assert!(odd.trusts(ip("192.0.2.200")) && !odd.trusts(ip("192.0.2.127")));
        let v6 = TrustedSources::parse("2001:db8:ffff:fffe::/63").unwrap();
        assert!(v6.trusts(ip("2001:db8:ffff:ffff::1")) && v6.trusts(ip("2001:db8:ffff:fffe::1")));
        assert!(!v6.trusts(ip("2001:db8:ffff:fffd::1")));
    }

    #[test]
    fn bad_blocks_are_one_clear_line() {
        for (text, says) in [
            ("", "empty item"),
            ("10.0.0.0/8,", "empty item"),
            ("10.0.0.0/33", "prefix length"),
            ("10.0.0.0/-1", "prefix length"),
            ("10.0.0.0/+8", "prefix length"),
            ("fd00::/129", "prefix length"),
            ("10.1.2.3/8", "beyond the /8 prefix"),
            ("balancer.example", "not an IPv4 or IPv6 CIDR block"),
            ("10.0.0.0/8/8", "prefix length"),
        ] {
            let err = TrustedSources::parse(text).unwrap_err();
            assert!(err.contains(says), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }
}
