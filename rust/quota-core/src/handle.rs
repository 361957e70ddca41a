//! Per-connection handles: a (principal, client-id) whose resolution is cached, so a request is
//! a generation check and a record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::clock::resolve_now;
use crate::error::QuotaError;
use crate::kernel::QuotaKernel;
use crate::record_mode::RecordMode;
use crate::sensor::QuotaSensor;
use crate::types::ClientQuotaType;
use crate::validate::{check_mutations, check_record_value, check_unrecord_value, thread_time_percent};

/// A per-connection view of the kernel for one (principal, client-id): the resolution is cached
/// in the handle, so a call is a generation check and a record.
///
/// Each quota type's slot holds the tags generation and a pointer to the sensor it resolved to,
/// read as a seqlock (writers, serialized by `keep`'s mutex, mark the slot `WRITING` while they
/// change it). The handle keeps every sensor it has pointed at alive in `keep` (a connection maps
/// to at most a few tag sets over its life), so a reader never sees a pointer to freed memory and
/// the hot path needs no reference counting.
// No over-alignment here: a handle is embedded in a Python object, whose memory CPython aligns
// to 16 bytes only.
pub struct ClientHandle {
    kernel: Arc<QuotaKernel>,
    user: Arc<str>,
    client_id: Arc<str>,
    slots: [HandleSlot; 4],
    keep: Mutex<Vec<Arc<QuotaSensor>>>,
    /// A shadow configuration's step, run by the response step beside the enforced one
    /// (`shadow`); `None`: no shadow, one branch.
    pub(crate) shadow: Option<Arc<dyn ShadowStep>>,
}

/// A second configuration evaluated on the same traffic and never enforced: the response step
/// calls it right after its enforced step with the same sizes and clock (`now` resolved). An
/// implementation may evaluate later (the kernel's queues it, `shadow_queue`).
pub trait ShadowStep: Send + Sync {
    /// A Produce response of `size` bytes (`answered` false for acks=0).
    fn produce(&self, size: f64, request_nanos: f64, answered: bool, now: i64);
    /// A Fetch response of `size` bytes delivered to the client.
    fn fetch(&self, size: f64, request_nanos: f64, now: i64);
    /// A response of a request quota'd by request time only.
    fn request(&self, request_nanos: f64, now: i64);
    /// The enforced handle is dropped: no response follows.
    fn close(&self);
    /// The would-be throttle (ms) and delayed bytes of quota type `t` not yet taken (each
    /// response's once: the request log puts them on its row of that type).
    fn take_logged(&self, t: ClientQuotaType) -> (i32, f64);
}

impl Drop for ClientHandle {
    fn drop(&mut self) {
        if let Some(s) = &self.shadow {
            s.close();
        }
    }
}

#[derive(Default)]
struct HandleSlot {
    generation: AtomicU64,
    sensor: std::sync::atomic::AtomicPtr<QuotaSensor>,
}

const SLOT_WRITING: u64 = u64::MAX;

impl ClientHandle {
    pub fn new(kernel: Arc<QuotaKernel>, user: &str, client_id: &str) -> Self {
        ClientHandle {
            kernel,
            user: Arc::from(user),
            client_id: Arc::from(client_id),
            slots: Default::default(),
            keep: Mutex::new(Vec::new()),
            shadow: None,
        }
    }

    /// This handle with a shadow configuration's step run beside its response steps.
    pub fn with_shadow(mut self, shadow: Arc<dyn ShadowStep>) -> Self {
        self.shadow = Some(shadow);
        self
    }

    /// The shadow step beside this handle's, if any.
    pub fn shadow(&self) -> Option<&Arc<dyn ShadowStep>> {
        self.shadow.as_ref()
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    pub fn kernel(&self) -> &Arc<QuotaKernel> {
        &self.kernel
    }

    #[inline]
    fn with_sensor<R>(
        &self,
        t: ClientQuotaType,
        now: i64,
        f: impl FnOnce(&QuotaSensor) -> Result<R, QuotaError>,
    ) -> Result<R, QuotaError> {
        match self.current(t) {
            Some(s) => f(s),
            None => self.refresh(t, now, f),
        }
    }

    /// The sensor this handle resolved for type `t`, while that resolution is current.
    #[inline]
    fn current(&self, t: ClientQuotaType) -> Option<&QuotaSensor> {
        let k = &*self.kernel;
        let generation = k.types[t.index()].tags_generation.load(Ordering::Acquire);
        let slot = &self.slots[t.index()];
        if slot.generation.load(Ordering::Acquire) == generation {
            let ptr = slot.sensor.load(Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::Acquire);
            if slot.generation.load(Ordering::Relaxed) == generation && !ptr.is_null() {
                // SAFETY: `ptr` came from an `Arc` held in `self.keep` for as long as `self` lives.
                return Some(unsafe { &*ptr });
            }
        }
        None
    }

    #[cold]
    fn refresh<R>(
        &self,
        t: ClientQuotaType,
        now: i64,
        f: impl FnOnce(&QuotaSensor) -> Result<R, QuotaError>,
    ) -> Result<R, QuotaError> {
        let r = self.kernel.resolve_current(t, &self.user, &self.client_id, now)?;
        let slot = &self.slots[t.index()];
        let mut keep = self.keep.lock();
        if !keep.iter().any(|s| Arc::ptr_eq(s, &r.sensor)) {
            keep.push(Arc::clone(&r.sensor));
        }
        let cur = slot.generation.load(Ordering::Acquire);
        // Never replace a newer resolution with an older one.
        if cur < r.tags_generation || cur == SLOT_WRITING {
            slot.generation.store(SLOT_WRITING, Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::Release);
            slot.sensor
                .store(Arc::as_ptr(&r.sensor) as *mut QuotaSensor, Ordering::Relaxed);
            slot.generation.store(r.tags_generation, Ordering::Release);
        }
        drop(keep);
        f(&r.sensor)
    }

    /// `value` has been checked by the caller (and is negative for `unrecord`).
    #[inline]
    fn record(
        &self,
        t: ClientQuotaType,
        value: f64,
        now: Option<i64>,
        mode: RecordMode,
    ) -> Result<i32, QuotaError> {
        self.on_sensor(t, now, |s, now| self.kernel.record_into(t, s, value, now, mode))
    }

    /// Runs `f` on the sensor of type `t` at `now` (resolved); 0 without resolving while no
    /// quota of the type exists.
    #[inline]
    fn on_sensor(
        &self,
        t: ClientQuotaType,
        now: Option<i64>,
        f: impl FnOnce(&QuotaSensor, i64) -> Result<i32, QuotaError>,
    ) -> Result<i32, QuotaError> {
        let now = resolve_now(now)?;
        if !self.kernel.enabled(t) {
            return Ok(0);
        }
        self.with_sensor(t, now, |s| f(s, now))
    }

    #[inline]
    pub fn record_and_get_throttle_time_ms(
        &self,
        t: ClientQuotaType,
        value: f64,
        now: Option<i64>,
    ) -> Result<i32, QuotaError> {
        check_record_value(value)?;
        self.record(t, value, now, RecordMode::Throttle)
    }

    pub fn record_no_throttle(
        &self,
        t: ClientQuotaType,
        value: f64,
        now: Option<i64>,
    ) -> Result<(), QuotaError> {
        check_record_value(value)?;
        self.record(t, value, now, RecordMode::Unchecked).map(|_| ())
    }

    pub fn unrecord(&self, t: ClientQuotaType, value: f64, now: Option<i64>) -> Result<(), QuotaError> {
        check_unrecord_value(value)?;
        self.record(t, -value, now, RecordMode::Unchecked).map(|_| ())
    }

    /// The throttle recording `value` now would give (see `QuotaKernel::peek_rate_throttle`),
    /// recording nothing; 0 while no quota of the type exists. Sampled-rate types only
    /// (PRODUCE, FETCH, REQUEST in percent of a thread).
    pub fn peek_throttle_time_ms(
        &self,
        t: ClientQuotaType,
        value: f64,
        now: Option<i64>,
    ) -> Result<i32, QuotaError> {
        check_record_value(value)?;
        if t == ClientQuotaType::ControllerMutation {
            return Err(QuotaError::InvalidArgument(
                "peek_throttle_time_ms is for sampled-rate quotas (PRODUCE, FETCH, REQUEST); \
                 CONTROLLER_MUTATION is a token bucket"
                    .into(),
            ));
        }
        let now = resolve_now(now)?;
        if !self.kernel.enabled(t) {
            return Ok(0);
        }
        // Kafka creates a sensor at its first record, its first sample starting then. A peek
        // (a proxy's, on a request before the broker's answer is recorded) creates none: a
        // sensor made at the request would start its windows the request's latency early, and
        // its throttles would fall that much short of Kafka's.
        match self.current(t) {
            Some(s) => Ok(self.kernel.peek_rate_throttle(t, s, value, now)),
            None => self.kernel.peek_named(t, &self.user, &self.client_id, value, now),
        }
    }

    /// [`peek_throttle_time_ms`](Self::peek_throttle_time_ms) of the topic quotas: the largest
    /// throttle recording each topic's bytes of `topics` now would give, recording nothing; 0
    /// while no topic quota of the type exists.
    pub fn peek_topic_throttle_ms(
        &self,
        t: ClientQuotaType,
        topics: &[(&str, f64)],
        now: Option<i64>,
    ) -> Result<i32, QuotaError> {
        let now = resolve_now(now)?;
        let k = &self.kernel;
        if !k.topics.enabled(t) {
            return Ok(0);
        }
        let mut worst = 0;
        for &(name, bytes) in topics {
            check_record_value(bytes)?;
            worst = worst.max(k.topics.peek_throttle(t, name, bytes, &k.settings.window, now));
        }
        Ok(worst)
    }

    /// [`QuotaKernel::record_request_time`] for this connection.
    #[inline]
    pub fn record_request_time(&self, nanos: f64, now: Option<i64>) -> Result<i32, QuotaError> {
        let percent = thread_time_percent(nanos)?;
        self.record(ClientQuotaType::Request, percent, now, RecordMode::Throttle)
    }

    /// [`QuotaKernel::record_network_thread_time`] for this connection.
    pub fn record_network_thread_time(&self, nanos: f64, now: Option<i64>) -> Result<(), QuotaError> {
        let percent = thread_time_percent(nanos)?;
        self.record(ClientQuotaType::Request, percent, now, RecordMode::Unchecked)
            .map(|_| ())
    }

    /// [`QuotaKernel::record_controller_mutations`] for this connection.
    #[inline]
    pub fn record_controller_mutations(
        &self,
        mutations: f64,
        now: Option<i64>,
        strict: bool,
    ) -> Result<i32, QuotaError> {
        check_mutations(mutations)?;
        self.record(
            ClientQuotaType::ControllerMutation,
            mutations,
            now,
            RecordMode::for_mutations(strict),
        )
    }
}
