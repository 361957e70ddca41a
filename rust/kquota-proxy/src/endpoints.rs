//! NodeEndpoints (KIP-951: the top-level tag 0 of Produce v10+ / Fetch v16+ responses): broker
//! addresses a client connects to directly, so they become the proxy's. A tagged section is
//! rewritten either freely (a response held whole) or to exactly its old length (a response
//! whose size prefix has already been sent): padded with an unknown tag, which clients skip, or,
//! if the rewrite is longer, without NodeEndpoints (the client then asks Metadata, through the
//! proxy, for the new leader) — a broker address never reaches the client.

use crate::wire::{malformed, put_compact_string, put_uvarint, uvarint_len, Cursor, Proto};

pub const NODE_ENDPOINTS: u64 = 0;

/// `(node id, broker host, broker port) -> (proxy host, proxy port)`.
pub type Resolve<'a> = dyn FnMut(i32, &str, i32) -> Proto<(String, i32)> + Send + 'a;

fn rewrite_endpoints(value: &[u8], resolve: &mut Resolve<'_>) -> Proto<Vec<u8>> {
    let mut c = Cursor::new(value, 0);
    let n = c.array_len(true)?;
    let mut out = Vec::with_capacity(value.len() + 16);
    put_uvarint(&mut out, n as u64 + 1);
    for _ in 0..n {
        let node_id = c.i32()?;
        let host_len = c.length(true, 2)?.unwrap_or(0);
        let host = std::str::from_utf8(c.take(host_len)?).or_else(|_| malformed("host is not UTF-8"))?;
        let port = c.i32()?;
        let (host, port) = if node_id >= 0 && !host.is_empty() {
            resolve(node_id, host, port)?
        } else {
            (host.to_owned(), port)
        };
        out.extend_from_slice(&node_id.to_be_bytes());
        put_compact_string(&mut out, Some(host.as_bytes()));
        out.extend_from_slice(&port.to_be_bytes());
        let rack_start = c.pos;
        let rack = c.length(true, 2)?.unwrap_or(0);
        c.skip(rack)?;
        let tags_start = rack_start;
        c.skip_tags(true)?;
        out.extend_from_slice(&value[tags_start..c.pos]); // rack and the node's own tags, as they were
    }
    Ok(out)
}

fn encode_section(tags: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    put_uvarint(&mut out, tags.len() as u64);
    for (tag, value) in tags {
        put_uvarint(&mut out, *tag);
        put_uvarint(&mut out, value.len() as u64);
        out.extend_from_slice(value);
    }
    out
}

/// `tags` grown to exactly `len` bytes by one unknown tag, or `None`.
fn padded(tags: &[(u64, Vec<u8>)], len: usize) -> Option<Vec<u8>> {
    let plain = encode_section(tags);
    if plain.len() == len {
        return Some(plain);
    }
    if plain.len() > len {
        return None;
    }
    let top = tags.iter().map(|t| t.0 + 1).max().unwrap_or(0).max(1); // above every known tag
    for pad in [top, top.max(128), top.max(16_384)] {
        for data_len in 0..len {
            let mut with = tags.to_vec();
            with.push((pad, vec![0; data_len]));
            let size = uvarint_len(with.len() as u64) + plain.len() - uvarint_len(tags.len() as u64)
                + uvarint_len(pad)
                + uvarint_len(data_len as u64)
                + data_len;
            if size == len {
                return Some(encode_section(&with));
            }
            if size > len {
                break;
            }
        }
    }
    None
}

/// The tagged section with NodeEndpoints rewritten (`None`: it has none). `exact`: the result
/// must have the section's own length.
pub fn rewrite_section(section: &[u8], exact: bool, resolve: &mut Resolve<'_>) -> Proto<Option<Vec<u8>>> {
    let mut c = Cursor::new(section, 0);
    let parsed = c.tags()?;
    if c.pos != section.len() {
        return malformed("bytes after the tagged fields");
    }
    if !parsed.iter().any(|(t, _)| *t == NODE_ENDPOINTS) {
        return Ok(None);
    }
    let mut tags = Vec::with_capacity(parsed.len());
    for (tag, value) in parsed {
        let value = if tag == NODE_ENDPOINTS {
            rewrite_endpoints(value, resolve)?
        } else {
            value.to_vec()
        };
        tags.push((tag, value));
    }
    if !exact {
        return Ok(Some(encode_section(&tags)));
    }
    if let Some(out) = padded(&tags, section.len()) {
        return Ok(Some(out));
    }
    tags.retain(|(t, _)| *t != NODE_ENDPOINTS);
    match padded(&tags, section.len()) {
        Some(out) => Ok(Some(out)),
        None => malformed("cannot fit the rewritten tagged fields"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(host: &str) -> Vec<u8> {
        let mut ep = Vec::new();
        put_uvarint(&mut ep, 2);
        ep.extend_from_slice(&3i32.to_be_bytes());
        put_compact_string(&mut ep, Some(host.as_bytes()));
        ep.extend_from_slice(&9092i32.to_be_bytes());
        ep.push(0); // null rack
        ep.push(0); // no tags
        encode_section(&[(NODE_ENDPOINTS, ep)])
    }

    fn to_proxy(node: i32, _h: &str, _p: i32) -> Proto<(String, i32)> {
        Ok(("127.0.0.1".to_owned(), 20_000 + node))
    }

    #[test]
    fn rewritten_addresses_and_exact_lengths() {
        let long = section("broker-three.example.internal");
        let free = rewrite_section(&long, false, &mut to_proxy).unwrap().unwrap();
        assert!(free.windows(9).any(|w| w == b"127.0.0.1"));
        let exact = rewrite_section(&long, true, &mut to_proxy).unwrap().unwrap();
        assert_eq!(exact.len(), long.len());
        assert!(exact.windows(9).any(|w| w == b"127.0.0.1"));
        assert!(!exact.windows(12).any(|w| w == b"broker-three"));
        // Too short to hold the rewrite: NodeEndpoints is dropped, never leaked.
        let short = section("b");
        let fitted = rewrite_section(&short, true, &mut to_proxy).unwrap().unwrap();
        assert_eq!(fitted.len(), short.len());
        let tags = Cursor::new(&fitted, 0).tags().unwrap();
        assert!(tags.iter().all(|(t, _)| *t != NODE_ENDPOINTS));
        assert_eq!(rewrite_section(&[0], true, &mut to_proxy).unwrap(), None);
    }

    #[test]
    fn every_spare_room_can_be_padded() {
        // A section that held NodeEndpoints is at least 4 bytes; 2 bytes cannot hold a tag.
        for len in (1..2).chain(3..400) {
            let out = padded(&[], len).expect("padding fits");
            assert_eq!(out.len(), len);
            Cursor::new(&out, 0).tags().unwrap();
        }
    }
}
