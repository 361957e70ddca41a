//! IP quota entities (KIP-612): which entity names are IP addresses, and their one canonical
//! form.
//!
//! Kafka's controller accepts an `ip` entity whose name `InetAddress.getByName` accepts: any IP
//! literal, and also any host name that resolves at that moment (`isValidIpEntity`). kquota
//! takes IPv4 and IPv6 literals only: a quota bound to whatever a name resolved to when it was
//! set silently stops matching when the name moves, and a DNS lookup has no place in validation.
//! Kafka keys its connection-rate quotas by `InetAddress`, so `::1` and `0:0:0:0:0:0:0:1` are one
//! address and an IPv4-mapped IPv6 address is the IPv4 one; kquota stores the canonical text
//! (`std::net` formatting, the IPv4 form of a mapped address) so that describe shows one entity
//! per address instead of Kafka's one per spelling.

use std::net::IpAddr;

/// The canonical address of `ip`: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is the IPv4
/// address, as Java's `InetAddress` makes it.
#[inline]
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Parses an IPv4 (dotted quad, no leading zeros) or IPv6 literal (no zone id, no brackets)
/// into its canonical address; the error says why in Kafka's words ("... is not a valid IP").
pub fn parse_ip(name: &str) -> Result<IpAddr, String> {
    name.parse::<IpAddr>().map(canonical_ip).map_err(|_| {
        format!(
            "{name:?} is not a valid IP address (an IPv4 or IPv6 literal; host names are not \
             resolved)"
        )
    })
}

/// The canonical text of an IP literal (`0:0::1` -> `::1`, `::ffff:10.0.0.1` -> `10.0.0.1`).
pub fn canonical_ip_text(name: &str) -> Result<String, String> {
    parse_ip(name).map(|ip| ip.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_accepted_in_canonical_form() {
        assert_eq!(canonical_ip_text("10.1.2.3").unwrap(), "10.1.2.3");
        assert_eq!(canonical_ip_text("0:0:0:0:0:0:0:1").unwrap(), "::1");
        assert_eq!(canonical_ip_text("2001:DB8::1").unwrap(), "2001:db8::1");
        assert_eq!(canonical_ip_text("::ffff:127.0.0.2").unwrap(), "127.0.0.2");
        assert_eq!(canonical_ip_text("::").unwrap(), "::");
    }

    #[test]
    fn non_literals_are_refused() {
        for bad in [
            "",
            "not a valid host because it has spaces",
            "RFC2606.invalid",
            "localhost",
            "10.1.2",
            "010.1.2.3",
            "256.1.2.3",
            "[::1]",
            "fe80::1%eth0",
            "10.1.2.3:9092",
            " 10.1.2.3",
        ] {
            let err = canonical_ip_text(bad).unwrap_err();
            assert!(err.contains("is not a valid IP"), "{bad}: {err}");
        }
    }
}
