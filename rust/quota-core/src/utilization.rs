//! Utilization (KIP-1373): per sensor, the measured rate over the effective quota × 100, beside
//! the quota and the precedence level it was found at. Computed on demand from the live sensors
//! as a metrics scrape is (nothing on the record path: no sensor is touched, no lock taken), and
//! bounded: every throttled entity plus the top `max_entities` by utilization, the rest summed
//! in one row per quota type.
//!
//! The selection walks the sensors twice instead of keeping a row per sensor: the first walk
//! keeps one number per sensor to find the K-th largest utilization, the second builds rows only
//! for the selected sensors (at 100k sensors, no string is copied for the 99k left out).

use crate::clock::resolve_now;
use crate::error::QuotaError;
use crate::kernel::QuotaKernel;
use crate::precedence::{QuotaLevel, TypeConfig};
use crate::sensor::QuotaSensor;
use crate::types::ClientQuotaType;

/// One entity's utilization: the sensor's tags and quota type, its measured rate, the effective
/// quota (after any fleet share; `None` unlimited) and the level it matched, the utilization
/// (NaN when unlimited or the quota is not positive, as KIP-1373) and whether it is throttled.
#[derive(Debug, Clone, PartialEq)]
pub struct UtilizationRow {
    pub quota_type: ClientQuotaType,
    pub user: Box<str>,
    pub client_id: Box<str>,
    pub rate: f64,
    pub quota: Option<f64>,
    pub level: Option<QuotaLevel>,
    pub utilization: f64,
    pub throttled: bool,
}

/// The entities of one quota type left out of the selection, summed: how many, their rates,
/// the quotas of the limited ones and the utilization of those (their rates over their quotas,
/// NaN when none is limited).
#[derive(Debug, Clone, PartialEq)]
pub struct UtilizationRest {
    pub quota_type: ClientQuotaType,
    pub entities: usize,
    pub rate: f64,
    pub quota: f64,
    pub utilization: f64,
    /// Sum of the limited entities' rates (the numerator of `utilization`).
    limited_rate: f64,
}

/// What [`QuotaKernel::utilization`] found.
#[derive(Debug, Clone, Default)]
pub struct UtilizationSnapshot {
    /// The time the rates were measured at.
    pub now_ms: i64,
    /// Every throttled entity, then up to `max_entities` others by utilization, in walk order.
    pub rows: Vec<UtilizationRow>,
    /// One row per quota type with entities left out.
    pub rest: Vec<UtilizationRest>,
}

/// KIP-1373's utilization: NaN unless the quota is a positive bound.
pub fn utilization_percent(rate: f64, quota: Option<f64>) -> f64 {
    match quota {
        Some(q) if q > 0.0 && q.is_finite() => rate / q * 100.0,
        _ => f64::NAN,
    }
}

/// The order of the selection: utilization, unlimited entities (NaN) below every number.
fn rank(utilization: f64) -> f64 {
    if utilization.is_nan() {
        -1.0
    } else {
        utilization
    }
}

impl QuotaKernel {
    /// The utilization of every throttled entity plus the `max_entities` others with the highest
    /// utilization at `now` (`None`: the kernel's estimate of the callers' clock), the rest
    /// summed per quota type. Touches no sensor: a scrape is not a use.
    pub fn utilization(&self, now: Option<i64>, max_entities: usize) -> Result<UtilizationSnapshot, QuotaError> {
        let now = match now {
            Some(t) => resolve_now(Some(t))?,
            None => self.estimated_now_ms(),
        };
        let snap = self.snapshot();
        let has_callback = self.has_callback_hook();
        // First walk: the rank of every entity not throttled, to find the K-th largest.
        let mut ranks: Vec<f64> = Vec::new();
        for t in ClientQuotaType::ALL {
            let cfg = &snap.types[t.index()];
            self.types[t.index()].sensors.for_each(|s| {
                let row = self.measure(t, cfg, has_callback, s, now);
                if !row.throttled {
                    ranks.push(rank(row.utilization));
                }
            });
        }
        // The K-th largest rank; entities at exactly this rank are taken until K are.
        let threshold = if max_entities == 0 {
            f64::INFINITY
        } else if ranks.len() <= max_entities {
            f64::NEG_INFINITY
        } else {
            let k = max_entities - 1;
            *ranks.select_nth_unstable_by(k, |a, b| b.total_cmp(a)).1
        };
        let mut at_threshold = ranks.iter().filter(|r| **r > threshold).count();
        drop(ranks);
        let mut out = UtilizationSnapshot {
            now_ms: now,
            ..Default::default()
        };
        let mut taken = 0usize;
        for t in ClientQuotaType::ALL {
            let cfg = &snap.types[t.index()];
            let mut rest = UtilizationRest {
                quota_type: t,
                entities: 0,
                rate: 0.0,
                quota: 0.0,
                utilization: f64::NAN,
                limited_rate: 0.0,
            };
            self.types[t.index()].sensors.for_each(|s| {
                let m = self.measure(t, cfg, has_callback, s, now);
                let r = rank(m.utilization);
                // Rates move between the walks when requests are recorded meanwhile: the count
                // taken is checked again, so the bound holds whatever changed.
                let keep = m.throttled
                    || (taken < max_entities
                        && (r > threshold || (r == threshold && at_threshold < max_entities)));
                if keep {
                    if !m.throttled {
                        taken += 1;
                        if r == threshold {
                            at_threshold += 1;
                        }
                    }
                    out.rows.push(UtilizationRow {
                        quota_type: t,
                        user: s.tags.user().into(),
                        client_id: s.tags.client_id().into(),
                        rate: m.rate,
                        quota: m.quota,
                        level: m.level,
                        utilization: m.utilization,
                        throttled: m.throttled,
                    });
                } else {
                    rest.entities += 1;
                    rest.rate += m.rate;
                    if let Some(q) = m.quota {
                        rest.quota += q;
                        rest.limited_rate += m.rate;
                    }
                }
            });
            if rest.entities > 0 {
                rest.utilization = utilization_percent(rest.limited_rate, Some(rest.quota));
                out.rest.push(rest);
            }
        }
        Ok(out)
    }

    /// One sensor's values at `now`, without its tags.
    fn measure(&self, t: ClientQuotaType, cfg: &TypeConfig, has_callback: bool, s: &QuotaSensor, now: i64) -> Measured {
        let rate = s.rate.peek(self.rate_spec(t), now).rate();
        let quota = self.reported_limit(t, cfg, has_callback, s);
        let level = if has_callback {
            quota.map(|_| QuotaLevel::Callback)
        } else {
            cfg.limit_and_level(s.tags.user(), s.tags.client_id()).map(|(_, l)| l)
        };
        // Kafka throttles a rate quota when the measured rate passes the bound, a controller
        // mutation quota (KIP-599's token bucket) when the bucket is in debt.
        let throttled = match quota {
            None => false,
            Some(q) if t == ClientQuotaType::ControllerMutation => match self.peek_tokens(s, Some(q), now) {
                Some(tokens) => tokens < 0.0,
                None => rate > q,
            },
            Some(q) => rate > q,
        };
        Measured {
            rate,
            quota,
            level,
            utilization: utilization_percent(rate, quota),
            throttled,
        }
    }
}

struct Measured {
    rate: f64,
    quota: Option<f64>,
    level: Option<QuotaLevel>,
    utilization: f64,
    throttled: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::{EntityName, QuotaEntity};
    use crate::settings::KernelConfig;
    use crate::snapshot::QuotaChange;

    fn kernel() -> QuotaKernel {
        QuotaKernel::new(KernelConfig::default()).expect("kernel")
    }

    fn set(k: &QuotaKernel, user: Option<&str>, client: Option<&str>, value: f64) {
        let name = |n: Option<&str>| {
            n.map(|n| {
                if n == "<default>" {
                    EntityName::Default
                } else {
                    EntityName::Name(n.into())
                }
            })
        };
        k.alter(
            &[QuotaChange {
                entity: QuotaEntity {
                    user: name(user),
                    client_id: name(client),
                },
                quota_type: ClientQuotaType::Produce,
                value: Some(value),
            }],
            false,
        )
        .expect("alter");
    }

    /// Records `rate` bytes/s for `client` over the whole window (11 samples of 1 s).
    fn record(k: &QuotaKernel, user: &str, client: &str, rate: f64) {
        for s in 0..11 {
            k.record_no_throttle(ClientQuotaType::Produce, user, client, rate, Some(s * 1000))
                .expect("record");
        }
    }

    fn row<'a>(snap: &'a UtilizationSnapshot, client: &str) -> &'a UtilizationRow {
        snap.rows.iter().find(|r| &*r.client_id == client).expect("row")
    }

    #[test]
    fn twice_the_quota_is_200_and_throttled_unlimited_is_nan() {
        let k = kernel();
        set(&k, None, Some("<default>"), 1000.0);
        record(&k, "u", "fast", 2000.0);
        record(&k, "u", "", 500.0); // an empty client-id under client-id quotas is unlimited
        let snap = k.utilization(Some(10_500), 10).expect("utilization");
        let fast = row(&snap, "fast");
        assert!((fast.utilization - 200.0).abs() < 10.0, "{fast:?}");
        assert!(fast.throttled);
        assert_eq!(fast.quota, Some(1000.0));
        assert_eq!(fast.level, Some(QuotaLevel::DefaultClient));
        let free = row(&snap, "");
        assert!(free.utilization.is_nan() && !free.throttled && free.quota.is_none() && free.level.is_none());
        assert!(snap.rest.is_empty());
    }

    #[test]
    fn the_level_is_the_one_that_matched() {
        let k = kernel();
        set(&k, Some("alice"), Some("c1"), 4000.0);
        set(&k, Some("<default>"), None, 2000.0);
        record(&k, "alice", "c1", 1000.0);
        record(&k, "bob", "c2", 1000.0);
        let snap = k.utilization(Some(10_500), 10).expect("utilization");
        let alice = row(&snap, "c1");
        assert_eq!(alice.level.map(QuotaLevel::name), Some("/config/users/<user>/clients/<client-id>"));
        assert!((alice.utilization - 25.0).abs() < 2.0, "{alice:?}");
        let bob = snap.rows.iter().find(|r| &*r.user == "bob").expect("bob");
        assert_eq!(bob.level.map(QuotaLevel::name), Some("/config/users/<default>"));
        assert!((bob.utilization - 50.0).abs() < 3.0, "{bob:?}");
    }

    #[test]
    fn the_bound_keeps_every_throttled_entity_and_sums_the_rest() {
        let k = kernel();
        set(&k, None, Some("<default>"), 1000.0);
        // 20,000 sensors below the quota (the highest at 99 %) and 30 throttled ones.
        for i in 0..20_000u32 {
            let rate = f64::from(i % 900) + 1.0;
            k.record_no_throttle(ClientQuotaType::Produce, "", &format!("c{i}"), rate * 11.0, Some(0))
                .expect("record");
        }
        for i in 0..30u32 {
            k.record_no_throttle(ClientQuotaType::Produce, "", &format!("hot{i}"), 50_000.0, Some(0))
                .expect("record");
        }
        let snap = k.utilization(Some(0), 10).expect("utilization");
        let throttled = snap.rows.iter().filter(|r| r.throttled).count();
        assert_eq!(throttled, 30);
        assert_eq!(snap.rows.len(), 40);
        // The ten others are the highest utilizations below the quota.
        let lowest_kept = snap
            .rows
            .iter()
            .filter(|r| !r.throttled)
            .map(|r| r.utilization)
            .fold(f64::INFINITY, f64::min);
        let top = snap.rows.iter().filter(|r| !r.throttled).map(|r| r.rate).fold(0.0, f64::max);
        assert!((lowest_kept - utilization_percent(top, Some(1000.0))).abs() < 1e-9, "{lowest_kept}");
        assert!(lowest_kept > 98.0, "{lowest_kept}");
        assert_eq!(snap.rest.len(), 1);
        let rest = &snap.rest[0];
        assert_eq!(rest.entities, 20_000 - 10);
        assert!(rest.utilization > 0.0 && rest.utilization < 100.0);
        // K = 0: the throttled alone.
        assert_eq!(k.utilization(Some(0), 0).expect("utilization").rows.len(), 30);
    }
}
