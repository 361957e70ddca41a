//! Bounds on the bytes of names the kernel keeps.
//!
//! The cap on live sensors bounds their count, not their size: a name may be long, and every
//! sensor keeps its tags, every metric-tag cache entry its raw names. Names longer than Kafka's
//! wire limit are refused outright, and the bytes of names held are counted against one budget
//! per kernel; at the budget a new tag set shares the overflow sensor of its shape (as at the
//! sensor cap) and a new cache entry is not kept.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::error::QuotaError;

/// Kafka's protocol carries principal names and client-ids as int16-length strings.
pub const MAX_NAME_BYTES: usize = i16::MAX as usize;

/// Default budget for the bytes of names held (tags of sensors and raw names of cache entries).
pub const DEFAULT_MAX_NAME_BYTES_HELD: usize = 256 << 20;

/// `Err(InvalidValue)` naming the argument when `name` is longer than [`MAX_NAME_BYTES`].
#[inline]
pub fn check_name(what: &str, name: &str) -> Result<(), QuotaError> {
    if name.len() > MAX_NAME_BYTES {
        return Err(name_too_long(what, name.len()));
    }
    Ok(())
}

/// [`check_name`] for both names of a request: every path from names to a sensor starts here,
/// the direct registry lookups included, so a name past the wire limit never records.
#[inline]
pub fn check_names(user: &str, client_id: &str) -> Result<(), QuotaError> {
    check_name("user", user)?;
    check_name("client_id", client_id)
}

/// The error for a name of `len` bytes past [`MAX_NAME_BYTES`].
#[cold]
pub fn name_too_long(what: &str, len: usize) -> QuotaError {
    QuotaError::InvalidValue(format!(
        "{what} is {len} bytes long in UTF-8; Kafka's limit is {MAX_NAME_BYTES} bytes (an int16 string)"
    ))
}

/// The byte budget: bytes reserved by live entries, and how often a reservation was refused.
pub(crate) struct ByteBudget {
    limit: usize,
    held: AtomicUsize,
    refused: AtomicU64,
}

impl ByteBudget {
    pub(crate) fn new(limit: usize) -> Self {
        ByteBudget {
            limit,
            held: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Reserves `n` bytes if they fit; a refusal is counted.
    pub(crate) fn try_reserve(&self, n: usize) -> bool {
        let mut cur = self.held.load(Ordering::Relaxed);
        loop {
            if cur.saturating_add(n) > self.limit {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            match self
                .held
                .compare_exchange_weak(cur, cur + n, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }

    pub(crate) fn release(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::AcqRel);
    }

    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_refuses_past_its_limit_and_counts() {
        let b = ByteBudget::new(10);
        assert!(b.try_reserve(6));
        assert!(!b.try_reserve(5));
        assert!(b.try_reserve(4));
        b.release(6);
        assert_eq!(b.held(), 4);
        assert_eq!(b.refused(), 1);
    }

    #[test]
    fn names_past_the_wire_limit_are_refused() {
        assert!(check_name("client_id", &"x".repeat(MAX_NAME_BYTES)).is_ok());
        assert!(check_name("client_id", &"x".repeat(MAX_NAME_BYTES + 1)).is_err());
    }
}
