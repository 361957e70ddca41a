//! Map keys of the kernel: name pairs, metric tags stored once per sensor, and borrowed lookups
//! that need no allocation.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use papaya::Equivalent;

/// `Arc<str>` of `s`; the empty string is one shared allocation.
pub(crate) fn shared_str(s: &str) -> Arc<str> {
    static EMPTY: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    if s.is_empty() {
        Arc::clone(EMPTY.get_or_init(|| Arc::from("")))
    } else {
        Arc::from(s)
    }
}

/// Owned `(a, b)` string pair used as a map key: raw names in the tag cache, tags in the
/// sensor registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamePair {
    pub first: Arc<str>,
    pub second: Arc<str>,
}

impl Hash for NamePair {
    fn hash<H: Hasher>(&self, state: &mut H) {
        PairRef(&self.first, &self.second).hash(state)
    }
}

/// Borrowed form of [`NamePair`] so lookups need no allocation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PairRef<'a>(pub(crate) &'a str, pub(crate) &'a str);

impl Hash for PairRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.hash(state);
        self.1.hash(state);
    }
}

impl Equivalent<NamePair> for PairRef<'_> {
    fn equivalent(&self, key: &NamePair) -> bool {
        *key.first == *self.0 && *key.second == *self.1
    }
}

/// Byte equality for equal-length slices, inline: names are short, so this beats a call to
/// `memcmp`.
#[inline]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    let mut ac = a.chunks_exact(8);
    let mut bc = b.chunks_exact(8);
    for (x, y) in (&mut ac).zip(&mut bc) {
        if u64::from_ne_bytes(x.try_into().unwrap()) != u64::from_ne_bytes(y.try_into().unwrap()) {
            return false;
        }
    }
    ac.remainder().iter().zip(bc.remainder()).all(|(x, y)| x == y)
}

/// Metric tags `(user, client-id)` in one allocation: `user NUL client-id`. A user tag never
/// holds a NUL: it is empty, or a sanitized name (only `[A-Za-z0-9._%-]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tags {
    joined: Box<str>,
}

impl Tags {
    /// Bytes of name data held (counted against the kernel's name budget).
    pub fn byte_len(&self) -> usize {
        self.joined.len()
    }

    pub fn new(user: &str, client_id: &str) -> Self {
        debug_assert!(!user.contains('\0'));
        let mut joined = String::with_capacity(user.len() + 1 + client_id.len());
        joined.push_str(user);
        joined.push('\0');
        joined.push_str(client_id);
        Tags {
            joined: joined.into_boxed_str(),
        }
    }

    #[inline]
    fn split(&self) -> usize {
        self.joined
            .bytes()
            .position(|b| b == 0)
            .unwrap_or(self.joined.len())
    }

    pub fn user(&self) -> &str {
        &self.joined[..self.split()]
    }

    pub fn client_id(&self) -> &str {
        &self.joined[(self.split() + 1).min(self.joined.len())..]
    }

    /// Equal to `(user, client_id)`, without searching for the separator.
    #[inline]
    pub(crate) fn is(&self, user: &str, client_id: &str) -> bool {
        let j = self.joined.as_bytes();
        j.len() == user.len() + 1 + client_id.len()
            && j[user.len()] == 0
            && short_eq(&j[..user.len()], user.as_bytes())
            && short_eq(&j[user.len() + 1..], client_id.as_bytes())
    }
}
