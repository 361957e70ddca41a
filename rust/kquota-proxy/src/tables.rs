//! What the Python side tells the data plane about the protocol (one source: the schema data
//! the asyncio proxy's codec reads): per API key, the first flexible version, the first
//! response version that begins with `ThrottleTimeMs`, which APIs Python handles and which are
//! exempt from the request quota.

pub const PRODUCE: i16 = 0;
pub const FETCH: i16 = 1;
pub const CONTROLLED_SHUTDOWN: i16 = 7;
pub const API_VERSIONS: i16 = 18;

#[derive(Debug, Clone, Default)]
pub struct ApiTables {
    /// index = api key: the first flexible version (-1: never).
    pub flexible_from: Vec<i16>,
    /// index = api key: the first response version beginning with `ThrottleTimeMs` (-1: none).
    pub throttle_first: Vec<i16>,
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

    pub fn is_python(&self, key: i16) -> bool {
        at(&self.python, key, false)
    }

    pub fn is_exempt(&self, key: i16) -> bool {
        at(&self.exempt, key, false)
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
