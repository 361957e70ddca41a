//! The data plane's two contracts: what it asks of Python ([`Bridge`]), and what a connection
//! offers the rest of the data plane and Python ([`Registered`]).

use crate::header::RequestHeader;

/// What the data plane asks of Python. Called from the runtime's threads: implementations only
/// hand the work to Python's event loop.
pub trait Bridge: Send + Sync + 'static {
    /// A request of an API Python handles (whole, without size prefix) and its header as the
    /// data plane parsed it (so Python does not parse it again); the connection reads nothing
    /// more until Python forwards or settles `slot`. An `Err` closes the connection.
    fn on_request(
        &self,
        conn: u64,
        slot: u64,
        node: i32,
        header: &RequestHeader,
        frame: &[u8],
        ns: u64,
    ) -> Result<(), String>;
    /// The broker's response to a slot Python forwarded.
    fn on_response(&self, conn: u64, slot: u64, frame: &[u8]) -> Result<(), String>;
    /// The connection is gone; `reason` says why when it was not a clean close.
    fn on_close(&self, conn: u64, reason: Option<String>);
}

/// A connection as the rest of the data plane (and Python) reaches it.
pub trait Registered: Send + Sync {
    /// Ends the connection (idempotent); Python is told.
    fn close(&self, reason: Option<String>);
    /// Wakes its waiting loops (the proxy stops).
    fn wake(&self);
    /// The answer of a slot (prefixed frame or none); `throttle` mutes after it.
    fn settle(&self, slot: u64, data: Option<Vec<u8>>, throttle: i32);
    /// Sends the request of a Python slot (frame without prefix) to the broker.
    fn python_forward(&self, slot: u64, frame: &[u8]) -> Result<(), String>;
    /// The principal used by the native quota paths.
    fn set_user(&self, user: &str);
    /// The principal now (a TLS client's mapped certificate subject before any SASL).
    fn user(&self) -> String;
}
