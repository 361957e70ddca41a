//! The data plane's protocol tables. The versions the proxy parses are defined here
//! (`PARSED_VERSIONS`, which Python reads through the binding to clamp ApiVersions); the rest
//! the Python side passes in from the schema data its codec reads: per API key, the first
//! flexible version, the first response version that begins with `ThrottleTimeMs`, which APIs
//! Python handles and which are exempt from the request quota. The rules reading them live here
//! or in the paths that use them, not in Python: Python is handed only requests of versions it
//! parses.

pub const PRODUCE: i16 = 0;
pub const FETCH: i16 = 1;
pub const LIST_OFFSETS: i16 = 2;
pub const METADATA: i16 = 3;
pub const CONTROLLED_SHUTDOWN: i16 = 7;
pub const FIND_COORDINATOR: i16 = 10;
pub const SASL_HANDSHAKE: i16 = 17;
pub const API_VERSIONS: i16 = 18;
pub const CREATE_TOPICS: i16 = 19;
pub const DELETE_TOPICS: i16 = 20;
pub const DELETE_RECORDS: i16 = 21;
pub const ALTER_CONFIGS: i16 = 33;
pub const SASL_AUTHENTICATE: i16 = 36;
pub const CREATE_PARTITIONS: i16 = 37;
pub const INCREMENTAL_ALTER_CONFIGS: i16 = 44;
pub const DESCRIBE_CLIENT_QUOTAS: i16 = 48;
pub const ALTER_CLIENT_QUOTAS: i16 = 49;
pub const DESCRIBE_CLUSTER: i16 = 60;
pub const DESCRIBE_TOPIC_PARTITIONS: i16 = 75;

/// (api key, min, max): the versions the proxy parses; a client is never offered more (the
/// ApiVersions clamp, in Python, reads this table) and a request of any other is refused
/// (`ApiTables::check_version`). APIs not listed are relayed at any version.
/// SaslHandshake is capped at v1 so that tokens travel in SaslAuthenticate (KIP-152), where the
/// proxy can read the username; v0's raw tokens would bypass the Kafka framing.
pub const PARSED_VERSIONS: &[(i16, i16, i16)] = &[
    (PRODUCE, 3, 11),
    (FETCH, 4, 17),
    (METADATA, 0, 12),
    (FIND_COORDINATOR, 0, 6),
    (SASL_HANDSHAKE, 1, 1),
    (API_VERSIONS, 0, 4),
    (CREATE_TOPICS, 0, 7),
    (DELETE_TOPICS, 0, 6),
    (SASL_AUTHENTICATE, 0, 2),
    (CREATE_PARTITIONS, 0, 3),
    (DESCRIBE_CLIENT_QUOTAS, 0, 1),
    (ALTER_CLIENT_QUOTAS, 0, 1),
    (DESCRIBE_CLUSTER, 0, 1),
    // Read for the proxy's own topics (kquota.proxy.own_topics).
    (LIST_OFFSETS, 0, 10),
    (DELETE_RECORDS, 0, 2),
    (ALTER_CONFIGS, 0, 2),
    (INCREMENTAL_ALTER_CONFIGS, 0, 1),
    (DESCRIBE_TOPIC_PARTITIONS, 0, 0),
];

#[derive(Debug, Clone, Default)]
pub struct ApiTables {
    /// index = api key: the first flexible version (-1: never).
    pub flexible_from: Vec<i16>,
    /// index = api key: the first response version beginning with `ThrottleTimeMs` (-1: none).
    pub throttle_first: Vec<i16>,
    /// index = api key: the versions the proxy parses and offers (None: relayed, any version);
    /// `ApiTables::parsed_versions()` builds it from `PARSED_VERSIONS`.
    pub parsed: Vec<Option<(i16, i16)>>,
    /// index = api key: handed to Python (the bridge).
    pub python: Vec<bool>,
    /// index = api key: exempt from the request quota (Kafka's cluster actions, SASL).
    pub exempt: Vec<bool>,
}

fn at<T: Copy>(table: &[T], key: i16, missing: T) -> T {
    usize::try_from(key)
        .ok()
        .and_then(|k| table.get(k).copied())
        .unwrap_or(missing)
}

impl ApiTables {
    pub fn is_flexible(&self, key: i16, version: i16) -> bool {
        let first = at(&self.flexible_from, key, -1);
        first >= 0 && version >= first
    }

    /// Whether this response begins with `ThrottleTimeMs` (patched in place).
    pub fn throttle_first(&self, key: i16, version: i16) -> bool {
        let first = at(&self.throttle_first, key, -1);
        first >= 0 && version >= first
    }

    /// Refuses a version outside those the proxy parses (and offers in ApiVersions), as Kafka's
    /// `SocketServer` closes a connection that sends a version its broker does not support; for
    /// every API, the ones handed to Python included (this is the only check). ApiVersions is
    /// the exception: any version of it is answered, `UNSUPPORTED_VERSION` for one not offered
    /// (KIP-511), so that a client can learn which versions to use.
    pub fn check_version(&self, key: i16, version: i16) -> Result<(), String> {
        if key == API_VERSIONS {
            return Ok(());
        }
        match at(&self.parsed, key, None) {
            Some((lo, hi)) if !(lo..=hi).contains(&version) => Err(format!(
                "api key {key} v{version}: not a version the proxy offers ({lo}-{hi})"
            )),
            _ => Ok(()),
        }
    }

    pub fn is_python(&self, key: i16) -> bool {
        at(&self.python, key, false)
    }

    pub fn is_exempt(&self, key: i16) -> bool {
        at(&self.exempt, key, false)
    }

    /// The `parsed` table of `PARSED_VERSIONS`.
    pub fn parsed_versions() -> Vec<Option<(i16, i16)>> {
        Self::version_ranges(PARSED_VERSIONS)
    }

    /// Builds the `parsed` table from (api key, min version, max version) rows.
    pub fn version_ranges(rows: &[(i16, i16, i16)]) -> Vec<Option<(i16, i16)>> {
        let len = rows.iter().map(|r| r.0.max(0) as usize + 1).max().unwrap_or(0);
        let mut out = vec![None; len];
        for &(k, lo, hi) in rows {
            if k >= 0 {
                out[k as usize] = Some((lo, hi));
            }
        }
        out
    }

    /// Builds a table indexed by api key from the listed keys.
    pub fn key_set(keys: &[i16]) -> Vec<bool> {
        let len = keys.iter().map(|&k| k.max(0) as usize + 1).max().unwrap_or(0);
        let mut out = vec![false; len];
        for &k in keys {
            if k >= 0 {
                out[k as usize] = true;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_outside_the_parsed_range_are_refused_and_unlisted_apis_pass() {
        let t = ApiTables {
            parsed: ApiTables::version_ranges(&[(PRODUCE, 3, 11), (FETCH, 4, 17), (API_VERSIONS, 0, 4)]),
            ..Default::default()
        };
        assert!(t.check_version(PRODUCE, 3).is_ok());
        assert!(t.check_version(PRODUCE, 11).is_ok());
        assert!(t.check_version(FETCH, 17).is_ok());
        for (key, version) in [
            (PRODUCE, 2),
            (PRODUCE, 12),
            (PRODUCE, -1),
            (FETCH, 3),
            (FETCH, 18),
        ] {
            let err = t.check_version(key, version).unwrap_err();
            assert!(err.contains(&format!("v{version}")), "{err}");
        }
        // ApiVersions is answered at any version (KIP-511).
        for version in [-1, 5, 99] {
            assert!(t.check_version(API_VERSIONS, version).is_ok());
        }
        // Relayed APIs (not in the table, or beyond it) take any version.
        assert!(t.check_version(CONTROLLED_SHUTDOWN, 99).is_ok());
        assert!(t.check_version(-5, 0).is_ok());
    }

    #[test]
    fn the_parsed_versions_table_is_well_formed() {
        let mut keys: Vec<i16> = PARSED_VERSIONS.iter().map(|r| r.0).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), PARSED_VERSIONS.len(), "an api key listed twice");
        for &(key, lo, hi) in PARSED_VERSIONS {
            assert!(key >= 0 && 0 <= lo && lo <= hi, "api key {key}: {lo}-{hi}");
        }
        let parsed = ApiTables::parsed_versions();
        assert_eq!(parsed[PRODUCE as usize], Some((3, 11)));
        assert_eq!(parsed[CONTROLLED_SHUTDOWN as usize], None);
    }
}
