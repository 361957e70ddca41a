//! What the request reader (`requests`) hands an API's request path (`produce_path`,
//! `fetch_path`, the relayed and Python ones) for one request: the [`Frame`] as read so far, and
//! the [`RequestSource`] it came from, which a path may go on reading (a Produce read whole to
//! see the proxy's own topics, or its batches relayed cut-through). Two values instead of the
//! ten arguments they bundle, so that a path's signature says what it is given.

use std::sync::Arc;
use std::time::Instant;

use crate::handle_cache::HandleCache;
use crate::header::RequestHeader;
use crate::io::Reader;
use crate::relay::Relay;

/// One request frame.
pub struct Frame {
    pub header: RequestHeader,
    /// The prefixed frame's bytes read so far: all of them, or a large Produce's head.
    pub buf: Vec<u8>,
    /// Bytes of the frame still unread on the client's socket.
    pub rest: usize,
    /// The frame's size as declared (without its prefix): what a Produce is charged.
    pub size: usize,
    /// When the frame was read: the proxy's time on the request runs from here.
    pub t0: Instant,
}

/// The client side of one connection, lent by the request reader for one request.
pub struct RequestSource {
    /// The client socket's read half.
    pub rd: Reader,
    /// Relays a frame's unread bytes to the broker uninspected.
    pub relay: Relay,
    /// The quota handle of the connection's latest (user, client id).
    pub handles: HandleCache,
    /// The connection's principal when the frame was read.
    pub user: Arc<str>,
}
