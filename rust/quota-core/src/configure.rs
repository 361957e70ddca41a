//! Changing what the kernel answers: alter, invalidate, a custom callback (KIP-257), close. Each
//! change is made under the writer lock and published as a new snapshot followed by its kind
//! bits and generations.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::callback::{CallbackSlot, QuotaCallbackHook};
use crate::entity::QuotaEntity;
use crate::error::QuotaError;
use crate::kernel::QuotaKernel;
use crate::shares::{check_fraction, ShareMap};
use crate::snapshot::{ConfigSnapshot, QuotaChange};
use crate::type_runtime::{CLOSED, CUSTOM_QUOTAS};
use crate::types::ClientQuotaType;
use crate::validate::validate_changes;

impl QuotaKernel {
    /// Validates every change, then applies them all in one step; on any error nothing changes.
    pub fn alter(&self, changes: &[QuotaChange], validate_only: bool) -> Result<(), QuotaError> {
        self.check_open()?;
        validate_changes(changes, self.settings.capacity_percent())?;
        if validate_only || changes.is_empty() {
            return Ok(());
        }
        let _w = self.writer.lock();
        self.check_open()?;
        let next = self.config.load().with_changes(changes);
        self.publish(next);
        Ok(())
    }

    /// Every configured entity with its keys.
    pub fn describe(&self) -> Vec<(QuotaEntity, Vec<(ClientQuotaType, f64)>)> {
        self.config.load().describe()
    }

    /// Stores `next` and then publishes its kind bits and generations (writer lock held). The
    /// generations go out after the snapshot: a reader that sees a new generation is guaranteed
    /// to load a snapshot at least that new.
    fn publish(&self, next: ConfigSnapshot) {
        let next = Arc::new(next);
        self.config.store(Arc::clone(&next));
        let custom = if self.hook.load().is_some() {
            CUSTOM_QUOTAS
        } else {
            0
        };
        let closed = if self.is_closed() { CLOSED } else { 0 };
        for (rt, cfg) in self.types.iter().zip(next.types.iter()) {
            rt.kinds.store(cfg.kinds | custom | closed, Ordering::Release);
            rt.tags_generation.store(cfg.tags_generation, Ordering::Release);
            rt.limits_generation
                .store(cfg.limits_generation, Ordering::Release);
        }
    }

    /// Publishes a snapshot with the chosen generations of `types` bumped (writer lock held).
    fn bump_locked(&self, types: &[ClientQuotaType], tags: bool, limits: bool) {
        let next = self.config.load().with_bumped(types, tags, limits);
        self.publish(next);
    }

    /// Makes every resolution of type `t` stale (after sensors were removed) and drops the
    /// metric-tag cache entries that thereby became useless. Goes through the snapshot so the
    /// snapshot and the published counter never disagree.
    pub(crate) fn bump_tags_generation(&self, t: ClientQuotaType) {
        {
            let _w = self.writer.lock();
            self.bump_locked(&[t], true, false);
        }
        let rt = &self.types[t.index()];
        let generation = rt.tags_generation.load(Ordering::Acquire);
        rt.cache.retain_generation(Some(generation), &self.names);
    }

    /// Forgets cached limits (and, with `tags`, cached tags) of the given types, so the next
    /// request asks again: after a quota update, a metadata change, or a callback's reset signal.
    pub fn invalidate(&self, types: &[ClientQuotaType], tags: bool) {
        let _w = self.writer.lock();
        self.bump_locked(types, tags, true);
    }

    /// Closes the kernel: every later record, resolution and configuration change fails with
    /// [`QuotaError::Closed`]. Idempotent.
    pub fn close(&self) {
        let _w = self.writer.lock();
        self.closed.store(true, Ordering::Release);
        // Publishing sets the CLOSED kind bit; the generation bump sends every cached
        // resolution (handles, binding caches) back through `resolve`, which refuses.
        self.bump_locked(&ClientQuotaType::ALL, true, true);
    }

    /// Installs (or with `None` removes) a custom quota callback. Every cached tag and limit is
    /// dropped, so the next request of each connection asks the new callback.
    pub fn set_callback_hook(&self, hook: Option<Box<dyn QuotaCallbackHook>>) {
        let _w = self.writer.lock();
        let polls = hook.as_ref().is_some_and(|h| h.polls_reset());
        self.hook.store(hook.map(|h| Arc::new(CallbackSlot(h))));
        for rt in &self.types {
            rt.poll_reset.store(polls, Ordering::Release);
        }
        for rt in &self.types {
            rt.cache.retain_generation(None, &self.names);
        }
        self.bump_locked(&ClientQuotaType::ALL, true, true);
    }

    /// Whether a custom callback is installed.
    pub fn has_callback_hook(&self) -> bool {
        self.hook.load().is_some()
    }

    /// Kafka polls `quotaResetRequired` after resolving each request's sensors.
    #[cold]
    pub(crate) fn poll_reset_required(&self, t: ClientQuotaType) {
        let reset = match self.hook.load().as_deref() {
            Some(h) => h.0.reset_required(t),
            None => false,
        };
        if reset {
            self.invalidate(&[t], true);
        }
    }
}

impl QuotaKernel {
    /// Replaces every share of type `t` in one step (all fractions checked first: on an error
    /// nothing changes), then makes each sensor of the type re-read its limit.
    pub fn set_shares(&self, t: ClientQuotaType, shares: ShareMap) -> Result<(), QuotaError> {
        self.check_open()?;
        check_fraction(shares.default)?;
        for f in shares.by_tags.values() {
            check_fraction(*f)?;
        }
        self.shares.types[t.index()].store(Arc::new(shares));
        self.invalidate(&[t], false);
        Ok(())
    }

    /// The shares of type `t` now.
    pub fn shares(&self, t: ClientQuotaType) -> ShareMap {
        ShareMap::clone(&self.shares.types[t.index()].load())
    }
}
