//! The hook through which a custom quota callback (KIP-257) decides tags and limits.
//!
//! The kernel asks the hook only on a cache miss: tags once per (type, principal, client-id)
//! until the next reset, and the limit once per sensor (tag set) until the next reset or quota
//! update, so a cached request costs what it costs without a callback. A hook may fail (a
//! callback that raises or answers garbage): the kernel then keeps the last good answer, or, if
//! there is none, uses the shared [`FAILED_TAGS`] sensor whose limit is the hook's
//! [`fallback_limit`](QuotaCallbackHook::fallback_limit) (fail-open or fail-closed), and asks
//! again on the next request.

use crate::types::ClientQuotaType;

/// The user-tag prefix of the kernel's internal sensors ([`FAILED_TAGS`]).
pub const INTERNAL_TAG_PREFIX: char = '\u{1}';

/// The user-tag prefix of a callback's tag map that is not exactly `{user, client-id}`, kept as
/// its canonical JSON after the prefix (`kquota.callback.encode_tags`); the exposition strips it.
pub const ENCODED_TAGS_PREFIX: char = '\u{2}';

/// Tags of the one sensor that requests go to when the callback failed to tag them and there is
/// no earlier answer to fall back on. [`INTERNAL_TAG_PREFIX`] cannot start a callback's own tag
/// (the binding refuses such answers), so no callback can collide.
pub const FAILED_TAGS: (&str, &str) = ("\u{1}callback-failed", "");

pub trait QuotaCallbackHook: Send + Sync {
    /// The metric tags `(user, client-id)` a request of `(principal name, client-id)` is recorded
    /// under, or `None` if the callback failed.
    fn metric_tags(&self, t: ClientQuotaType, user: &str, client_id: &str) -> Option<(String, String)>;

    /// The limit for a tag set: `Some(None)` unlimited, `Some(Some(bound))` with `bound >= 0`
    /// (0 blocks: the maximum throttle for the type), `None` if the callback failed.
    fn limit(&self, t: ClientQuotaType, tag_user: &str, tag_client_id: &str) -> Option<Option<f64>>;

    /// The limit applied when the callback failed and there is no earlier answer: `None` (fail
    /// open: unthrottled) or `Some(0.0)` (fail closed: blocked).
    fn fallback_limit(&self) -> Option<f64>;

    /// Whether [`reset_required`](Self::reset_required) must be polled on every request (only
    /// for callbacks that implement it).
    fn polls_reset(&self) -> bool;

    /// Kafka's `quotaResetRequired`: true if tags and limits must be asked again.
    fn reset_required(&self, t: ClientQuotaType) -> bool;
}

/// The installed hook (a box so it can sit in an `ArcSwapOption`).
pub struct CallbackSlot(pub Box<dyn QuotaCallbackHook>);
