//! What a record call does about the quota: Kafka's record-and-check, record-only, and the two
//! controller-mutation modes (`newStrictQuotaFor` / `newPermissiveQuotaFor`).

/// What a record call should do about the quota.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum RecordMode {
    /// Record, then return the throttle. For controller mutations this is Kafka's
    /// `ControllerMutationQuotaManager.recordAndGetThrottleTimeMs`: check the bucket first and
    /// record only if it is not in debt, returning the throttle either way.
    Throttle,
    /// Record without any check (`recordNoThrottle`, `unrecord`, network-thread time).
    Unchecked,
    /// Controller mutations, permissive: record, then return the throttle if the bucket is now
    /// in debt.
    Permissive,
    /// Controller mutations, strict: if the bucket is already in debt record nothing and fail
    /// with `ThrottlingQuotaExceeded`; otherwise record.
    Strict,
}

impl RecordMode {
    /// The mode of a controller-mutation record: Kafka's strict quota for requests that must
    /// fail when throttled (e.g. CreateTopics v6+), else the permissive one.
    #[inline]
    pub(crate) fn for_mutations(strict: bool) -> RecordMode {
        if strict {
            RecordMode::Strict
        } else {
            RecordMode::Permissive
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RecordMode;

    #[test]
    fn strict_flag_selects_the_mutation_mode() {
        assert_eq!(RecordMode::for_mutations(true), RecordMode::Strict);
        assert_eq!(RecordMode::for_mutations(false), RecordMode::Permissive);
    }
}
