//! What a client of a SASL listener may send before it has authenticated, as Kafka's
//! `SaslServerAuthenticator` admits it: frames of at most `sasl.server.max.receive.size` bytes
//! (a longer declaration closes the connection: Kafka's `InvalidReceiveException`), and only
//! ApiVersions, SaslHandshake and SaslAuthenticate (anything else closes it: Kafka's
//! `IllegalSaslStateException`), one at a time (the authenticator reads the next request once
//! it has answered the last). So nothing reaches the native quota paths, and nothing is
//! recorded in the kernel, before a completed exchange; Python marks that moment with
//! `ProxyDataPlane.set_user` ([`Authentication::complete`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::tables::API_VERSIONS;

/// Kafka's `sasl.server.max.receive.size` default (`BrokerSecurityConfigs`).
pub const DEFAULT_SASL_MAX_RECEIVE_SIZE: usize = 524_288;
pub const SASL_HANDSHAKE: i16 = 17;
pub const SASL_AUTHENTICATE: i16 = 36;

/// One connection's authentication state, shared by its request reader and Python's
/// `set_user` (through [`crate::Shared::authentications`]).
#[derive(Debug, Default)]
pub struct Authentication {
    done: AtomicBool,
}

impl Authentication {
    pub fn new() -> Arc<Authentication> {
        Arc::new(Authentication::default())
    }

    /// The broker completed the client's exchange (Python decides when; see the module docs).
    pub fn complete(&self) {
        self.done.store(true, Ordering::Release);
    }

    pub fn is_complete(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

/// The bounds of a connection's requests while it has not authenticated.
#[derive(Debug, Clone, Copy)]
pub struct PreAuth {
    /// `sasl.server.max.receive.size`.
    pub max_receive: usize,
}

impl PreAuth {
    /// A declared frame size before authentication: `Err` (the line to close with) past the
    /// limit, as Kafka's `NetworkReceive` refuses it before reading a byte of the frame.
    pub fn check_size(&self, size: i32) -> Result<usize, String> {
        match usize::try_from(size) {
            Ok(n) if n <= self.max_receive => Ok(n),
            _ => Err(format!(
                "invalid receive (size = {size} larger than {}) before authentication \
                 (sasl.server.max.receive.size)",
                self.max_receive
            )),
        }
    }

    /// An API before authentication: only ApiVersions and the SASL exchange.
    pub fn check_api(&self, api_key: i16) -> Result<(), String> {
        match api_key {
            API_VERSIONS | SASL_HANDSHAKE | SASL_AUTHENTICATE => Ok(()),
            key => Err(format!(
                "unexpected Kafka request of type {key} during SASL handshake (the client has not \
                 authenticated)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_past_the_limit_and_negative_ones_close() {
        let p = PreAuth {
            max_receive: DEFAULT_SASL_MAX_RECEIVE_SIZE,
        };
        assert_eq!(p.check_size(524_288), Ok(524_288));
        assert_eq!(p.check_size(0), Ok(0));
        let err = p.check_size(524_289).unwrap_err();
        assert!(err.contains("size = 524289 larger than 524288"), "{err}");
        assert!(p.check_size(-1).is_err());
        assert!(p.check_size(i32::MAX).is_err());
    }

    #[test]
    fn only_api_versions_and_sasl_before_authentication() {
        let p = PreAuth { max_receive: 10 };
        for key in [API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE] {
            assert!(p.check_api(key).is_ok(), "{key}");
        }
        for key in [0, 1, 3, 32, 48, 49, 19, -1, i16::MAX] {
            let err = p.check_api(key).unwrap_err();
            assert!(err.contains(&format!("type {key} during SASL handshake")), "{err}");
        }
    }

    #[test]
    fn authentication_completes_once_for_all_holders() {
        let a = Authentication::new();
        let reader = Arc::clone(&a);
        assert!(!reader.is_complete());
        a.complete();
        assert!(reader.is_complete());
    }
}
