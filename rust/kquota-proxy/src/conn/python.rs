//! What Python does to a connection, through the `Registered` contract (`bridge`): forward the
//! request of a slot it was handed, settle a slot with its answer, set the principal (SASL),
//! close it. Python holds no connection object: only its id, looked up in `Shared::conns`.

use std::sync::Arc;

use crate::bridge::Registered;
use crate::forwarded::{Fwd, Kind};
use crate::wire::read_i32;

use super::Conn;

impl Conn {
    /// Python forwards the request of its slot (frame without prefix).
    pub fn python_forward(&self, slot: u64, frame: &[u8]) -> Result<(), String> {
        if frame.len() < 8 {
            return Err("a request shorter than its header".into());
        }
        let mut prefixed = Vec::with_capacity(4 + frame.len());
        prefixed.extend_from_slice(&(frame.len() as i32).to_be_bytes());
        prefixed.extend_from_slice(frame);
        let fwd = Fwd {
            slot,
            corr: read_i32(frame, 4).unwrap_or(0),
            key: i16::from_be_bytes([frame[0], frame[1]]),
            version: i16::from_be_bytes([frame[2], frame[3]]),
            ns: 0,
            read: std::time::Instant::now(),
            kind: Kind::Python,
        };
        self.forward_locked(&mut self.state(), fwd, prefixed);
        self.changed.notify_waiters();
        Ok(())
    }

    pub fn set_user(&self, user: &str) {
        self.state().user = Arc::from(user);
    }

    pub fn user(&self) -> String {
        self.state().user.to_string()
    }
}

impl Registered for Conn {
    fn close(&self, reason: Option<String>) {
        Conn::close(self, reason);
    }

    fn wake(&self) {
        Conn::wake(self);
    }

    fn settle(&self, slot: u64, data: Option<Vec<u8>>, throttle: i32) {
        Conn::settle(self, slot, data, throttle);
    }

    fn python_forward(&self, slot: u64, frame: &[u8]) -> Result<(), String> {
        Conn::python_forward(self, slot, frame)
    }

    fn set_user(&self, user: &str) {
        Conn::set_user(self, user);
    }

    fn user(&self) -> String {
        Conn::user(self)
    }
}
