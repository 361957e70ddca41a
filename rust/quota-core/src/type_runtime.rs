//! What the kernel keeps per quota type beside the configuration snapshot: the published kind
//! bits and generations (read on every request), the sensor registry and the metric-tag cache.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8};

use crate::client_ids::ClientIds;
use crate::precedence::TypeConfig;
use crate::registry::SensorRegistry;
use crate::tag_cache::TagCache;

/// Kind bit set on every type while a custom callback is installed (Kafka's `CustomQuotas`):
/// quotas are then always enabled and tags always come from the callback, through the cache.
pub(crate) const CUSTOM_QUOTAS: u8 = 8;

/// Kind bit set on every type once the kernel is closed: the record paths then leave their fast
/// paths (the tags generation is bumped too) and meet the closed check in `resolve`, so the
/// cached path pays nothing for it.
pub(crate) const CLOSED: u8 = 16;

// Whole cache lines: sensor writes elsewhere on the heap never share a line with these
// read-on-every-request counters.
#[repr(align(64))]
pub(crate) struct TypeRuntime {
    /// The type's kind bits (`CLIENT_ID_QUOTAS` ... plus `CUSTOM_QUOTAS`/`CLOSED`); 0 = no quota
    /// of this type yet.
    pub(crate) kinds: AtomicU8,
    /// Whether the installed callback wants `quota_reset_required` polled on every record (here,
    /// beside `kinds`, so the record path reads no extra cache line).
    pub(crate) poll_reset: AtomicBool,
    pub(crate) tags_generation: AtomicU64,
    pub(crate) limits_generation: AtomicU64,
    pub(crate) sensors: SensorRegistry,
    pub(crate) cache: TagCache,
    /// Each principal's distinct client ids, bounded (`client_ids`).
    pub(crate) client_ids: ClientIds,
}

impl TypeRuntime {
    pub(crate) fn new(cfg: &TypeConfig) -> Self {
        TypeRuntime {
            kinds: AtomicU8::new(cfg.kinds),
            poll_reset: AtomicBool::new(false),
            tags_generation: AtomicU64::new(cfg.tags_generation),
            limits_generation: AtomicU64::new(cfg.limits_generation),
            sensors: SensorRegistry::new(),
            cache: TagCache::new(),
            client_ids: ClientIds::new(),
        }
    }
}
