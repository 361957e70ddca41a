//! Map keys of the kernel: name pairs, metric tags stored once per sensor, and borrowed lookups
//! that need no allocation.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::hash::{Hash, Hasher};
use std::ptr::NonNull;
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
///
/// A thin pointer (8 bytes, where a `Box<str>` takes 16): every sensor holds one, and the
/// sensor's size is a memory budget. The allocation is a `u32` length followed by the bytes;
/// names are far below 4 GiB (`name_budget::MAX_NAME_BYTES`).
pub struct Tags {
    ptr: NonNull<u8>,
}

// SAFETY: `Tags` owns an immutable allocation, like a `Box<str>`.
unsafe impl Send for Tags {}
unsafe impl Sync for Tags {}

const LEN_BYTES: usize = std::mem::size_of::<u32>();

fn layout(len: usize) -> Layout {
    Layout::from_size_align(LEN_BYTES + len, std::mem::align_of::<u32>()).expect("tag length")
}

impl Tags {
    pub fn new(user: &str, client_id: &str) -> Self {
        debug_assert!(!user.contains('\0'));
        let len = user.len() + 1 + client_id.len();
        let len32 = u32::try_from(len).expect("tags longer than 4 GiB");
        let layout = layout(len);
        // SAFETY: the layout has a non-zero size; every byte is written before it is read.
        unsafe {
            let Some(ptr) = NonNull::new(alloc(layout)) else {
                handle_alloc_error(layout)
            };
            ptr.as_ptr().cast::<u32>().write(len32);
            let bytes = ptr.as_ptr().add(LEN_BYTES);
            std::ptr::copy_nonoverlapping(user.as_ptr(), bytes, user.len());
            bytes.add(user.len()).write(0);
            std::ptr::copy_nonoverlapping(client_id.as_ptr(), bytes.add(user.len() + 1), client_id.len());
            Tags { ptr }
        }
    }

    /// `user NUL client-id`.
    #[inline]
    fn joined(&self) -> &str {
        // SAFETY: `new` wrote the length and that many bytes of valid UTF-8 (two `str`s joined
        // by NUL), and the allocation lives as long as `self`.
        unsafe {
            let len = self.ptr.as_ptr().cast::<u32>().read() as usize;
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(self.ptr.as_ptr().add(LEN_BYTES), len))
        }
    }

    /// Bytes of name data held (counted against the kernel's name budget).
    pub fn byte_len(&self) -> usize {
        self.joined().len()
    }

    #[inline]
    fn split(&self) -> usize {
        let j = self.joined();
        j.bytes().position(|b| b == 0).unwrap_or(j.len())
    }

    pub fn user(&self) -> &str {
        &self.joined()[..self.split()]
    }

    pub fn client_id(&self) -> &str {
        let j = self.joined();
        &j[(self.split() + 1).min(j.len())..]
    }

    /// Equal to `(user, client_id)`, without searching for the separator.
    #[inline]
    pub(crate) fn is(&self, user: &str, client_id: &str) -> bool {
        let j = self.joined().as_bytes();
        j.len() == user.len() + 1 + client_id.len()
            && j[user.len()] == 0
            && short_eq(&j[..user.len()], user.as_bytes())
            && short_eq(&j[user.len() + 1..], client_id.as_bytes())
    }
}

impl Drop for Tags {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, and dropped once.
        unsafe { dealloc(self.ptr.as_ptr(), layout(self.byte_len())) }
    }
}

impl Clone for Tags {
    fn clone(&self) -> Self {
        Tags::new(self.user(), self.client_id())
    }
}

impl PartialEq for Tags {
    fn eq(&self, other: &Self) -> bool {
        self.joined() == other.joined()
    }
}

impl Eq for Tags {}

impl std::fmt::Debug for Tags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Tags")
            .field(&self.user())
            .field(&self.client_id())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::Tags;

    #[test]
    fn tags_are_a_thin_pointer_and_round_trip() {
        assert_eq!(std::mem::size_of::<Tags>(), 8);
        for (u, c) in [("", ""), ("alice", ""), ("", "c\0x"), ("user-1", "client-ü")] {
            let t = Tags::new(u, c);
            assert_eq!(
                (t.user(), t.client_id(), t.byte_len()),
                (u, c, u.len() + 1 + c.len())
            );
            assert!(t.is(u, c) && !t.is(c, u) || u == c);
            assert_eq!(t.clone(), t);
        }
    }
}
