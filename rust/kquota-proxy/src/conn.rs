//! One client connection: its own broker connection, requests relayed in order, quotas applied.
//!
//! Two loops share the connection's state: the request reader (client -> broker) and the
//! response reader (broker -> client). Every request holds a slot; answers leave in slot
//! (request) order, whoever made them — the broker, the proxy, or Python for the APIs it
//! handles. A throttled answer mutes the connection afterwards (KIP-219): nothing more is read
//! until the throttle has passed, and a connection throttled within the last quota window is
//! read one request at a time (Kafka reads a channel's next request only once the previous
//! answer has gone). Readers stop while their peer's outbox holds more than `BACKLOG` bytes and
//! at `max_inflight` unanswered requests: memory per connection is bounded both ways.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use quota_core::{ClientHandle, ClientQuotaType};
use tokio::io::{AsyncReadExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use crate::header::{parse_request_header, RequestHeader};
use crate::outbox::Outbox;
use crate::server::Shared;
use crate::tables::{FETCH, PRODUCE};
use crate::wire::read_i32;

/// Frames at least this long are relayed cut-through (Produce requests, Fetch responses).
pub const STREAM_MIN: usize = 64 << 10;
/// The head of a streamed frame read before deciding.
pub const HEAD: usize = 8 << 10;
/// Bytes relayed per write while streaming.
pub const CHUNK: usize = 256 << 10;
/// A reader stops while its peer has this much queued.
pub const BACKLOG: usize = 4 << 20;
/// acks=0 correlation ids remembered (some brokers answer them anyway).
const MAX_UNANSWERED: usize = 4096;
const READ_BUFFER: usize = 64 << 10;

pub type Reader = BufReader<OwnedReadHalf>;

pub struct Slot {
    id: u64,
    done: bool,
    data: Option<Vec<u8>>,
    throttle: i32,
}

pub enum Kind {
    /// Relayed unparsed: only the request quota's throttle is added (`None`: exempt).
    Plain(Option<Arc<ClientHandle>>),
    /// Python answers it.
    Python,
    Produce {
        handle: Arc<ClientHandle>,
        size: usize,
    },
    Fetch(crate::fetch_path::FetchState),
}

pub struct Fwd {
    pub slot: u64,
    pub corr: i32,
    pub key: i16,
    pub version: i16,
    /// Proxy time spent on the request so far.
    pub ns: u64,
    pub kind: Kind,
}

pub struct ConnState {
    slots: VecDeque<Slot>,
    next_slot: u64,
    pub forwarded: VecDeque<Fwd>,
    muted_until: Option<Instant>,
    serial_until: Option<Instant>,
    pub user: Arc<str>,
    /// The slot handed to Python and not yet forwarded or settled.
    python_waiting: Option<u64>,
    pub unanswered: HashSet<i32>,
    unanswered_order: VecDeque<i32>,
}

pub struct Conn {
    pub id: u64,
    pub node: i32,
    pub shared: Arc<Shared>,
    st: Mutex<ConnState>,
    changed: Notify,
    pub to_client: Arc<Outbox>,
    pub to_broker: Arc<Outbox>,
    closed: AtomicBool,
    reason: Mutex<Option<String>>,
}

/// The quota handle of the connection's latest (user, client id).
#[derive(Default)]
pub struct HandleCache {
    user: Option<Arc<str>>,
    client: String,
    handle: Option<Arc<ClientHandle>>,
}

impl HandleCache {
    pub fn get(
        &mut self,
        shared: &Shared,
        user: &Arc<str>,
        client: &str,
    ) -> Result<Arc<ClientHandle>, String> {
        if let (Some(u), Some(h)) = (&self.user, &self.handle) {
            if Arc::ptr_eq(u, user) && self.client == client {
                return Ok(Arc::clone(h));
            }
        }
        quota_core::check_names(user, client).map_err(|e| e.to_string())?;
        let h = Arc::new(ClientHandle::new(Arc::clone(&shared.kernel), user, client));
        self.user = Some(Arc::clone(user));
        self.client.clear();
        self.client.push_str(client);
        self.handle = Some(Arc::clone(&h));
        Ok(h)
    }
}

pub fn io_err(what: &str) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Serves one accepted client connection until either side closes or a frame is malformed.
pub async fn serve(shared: Arc<Shared>, id: u64, node: i32, sock: TcpStream, upstream: (String, u16)) {
    let _ = sock.set_nodelay(true);
    let up = match TcpStream::connect((upstream.0.as_str(), upstream.1)).await {
        Ok(up) => up,
        Err(e) => {
            shared.bridge.on_close(
                id,
                Some(format!("cannot reach broker {}:{}: {e}", upstream.0, upstream.1)),
            );
            return;
        }
    };
    let _ = up.set_nodelay(true);
    let (cr, cw) = sock.into_split();
    let (ur, uw) = up.into_split();
    let failed = Arc::new(Notify::new());
    let (conn, writers) = Conn::new(&shared, id, node, cw, uw, &failed);
    shared.conns.lock().unwrap().insert(id, Arc::clone(&conn));
    let reason = conn.run(cr, ur, &failed, &upstream).await;
    conn.close(reason);
    for w in writers {
        w.abort();
    }
}

impl Conn {
    fn new(
        shared: &Arc<Shared>,
        id: u64,
        node: i32,
        cw: OwnedWriteHalf,
        uw: OwnedWriteHalf,
        failed: &Arc<Notify>,
    ) -> (Arc<Conn>, [tokio::task::JoinHandle<()>; 2]) {
        let (to_client, wc) = Outbox::new(cw, Arc::clone(failed));
        let (to_broker, wb) = Outbox::new(uw, Arc::clone(failed));
        let writers = [tokio::spawn(wc), tokio::spawn(wb)];
        let conn = Arc::new(Conn {
            id,
            node,
            shared: Arc::clone(shared),
            st: Mutex::new(ConnState {
                slots: VecDeque::new(),
                next_slot: 0,
                forwarded: VecDeque::new(),
                muted_until: None,
                serial_until: None,
                user: Arc::from("ANONYMOUS"),
                python_waiting: None,
                unanswered: HashSet::new(),
                unanswered_order: VecDeque::new(),
            }),
            changed: Notify::new(),
            to_client,
            to_broker,
            closed: AtomicBool::new(false),
            reason: Mutex::new(None),
        });
        (conn, writers)
    }

    async fn run(
        self: &Arc<Self>,
        cr: OwnedReadHalf,
        ur: OwnedReadHalf,
        failed: &Notify,
        up: &(String, u16),
    ) -> Option<String> {
        let requests = self.read_requests(BufReader::with_capacity(READ_BUFFER, cr));
        let responses = self.read_responses(BufReader::with_capacity(READ_BUFFER, ur), up);
        tokio::pin!(requests, responses);
        let closed = self.until_closed();
        tokio::pin!(closed);
        tokio::select! {
            r = &mut requests => match r {
                // The client closed (or the proxy stops reading): answers owed still go out.
                Ok(()) => {
                    let drained = async {
                        self.wait_until(|st| st.slots.is_empty()).await;
                        self.to_client.wait_below(0).await;
                    };
                    tokio::select! {
                        r = &mut responses => r.err(),
                        _ = drained => None,
                        _ = tokio::time::sleep(self.shared.cfg.drain) => None,
                        _ = &mut closed => self.reason.lock().unwrap().take(),
                    }
                }
                Err(e) => Some(e),
            },
            r = &mut responses => Some(r.err().unwrap_or_else(|| "the broker closed the connection".into())),
            _ = failed.notified() => Some("a socket write failed".into()),
            _ = &mut closed => self.reason.lock().unwrap().take(),
        }
    }

    /// Ends the connection (idempotent); Python is told.
    pub fn close(&self, reason: Option<String>) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        *self.reason.lock().unwrap() = reason.clone();
        self.changed.notify_waiters();
        self.shared.conns.lock().unwrap().remove(&self.id);
        self.shared.bridge.on_close(self.id, reason);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn wake(&self) {
        self.changed.notify_waiters();
    }

    async fn until_closed(&self) {
        self.wait_until(|_| false).await;
    }

    pub fn state(&self) -> MutexGuard<'_, ConnState> {
        self.st.lock().unwrap()
    }

    /// Returns once `cond` holds (or the connection is closed).
    pub async fn wait_until(&self, mut cond: impl FnMut(&ConnState) -> bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.is_closed() || cond(&self.state()) {
                return;
            }
            changed.await;
        }
    }

    fn mute_delay(&self) -> Option<Duration> {
        let until = self.state().muted_until?;
        until
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }

    // ------------------------------------------------------------------ slots

    pub fn push_slot(st: &mut ConnState) -> u64 {
        let id = st.next_slot;
        st.next_slot += 1;
        st.slots.push_back(Slot {
            id,
            done: false,
            data: None,
            throttle: 0,
        });
        id
    }

    /// Records a slot's answer and sends every answer now ready at the head, in order.
    pub fn settle_locked(&self, st: &mut ConnState, slot: u64, data: Option<Vec<u8>>, throttle: i32) {
        let Some(s) = st.slots.iter_mut().find(|s| s.id == slot) else {
            return;
        };
        s.data = data;
        s.throttle = throttle;
        s.done = true;
        while st.slots.front().is_some_and(|s| s.done) {
            let s = st.slots.pop_front().unwrap();
            if let Some(data) = s.data {
                self.to_client.send(data);
            }
            if s.throttle > 0 {
                let until = Instant::now() + Duration::from_millis(s.throttle as u64);
                let muted = st.muted_until.map_or(until, |m| m.max(until));
                st.muted_until = Some(muted);
                st.serial_until = Some(muted + Duration::from_millis(self.shared.cfg.quota_window_ms));
            }
        }
        if st.python_waiting == Some(slot) {
            st.python_waiting = None;
        }
    }

    pub fn settle(&self, slot: u64, data: Option<Vec<u8>>, throttle: i32) {
        self.settle_locked(&mut self.state(), slot, data, throttle);
        self.changed.notify_waiters();
    }

    /// Sends a request (prefixed frame) to the broker, its answer expected in `fwd`.
    pub fn forward_locked(&self, st: &mut ConnState, fwd: Fwd, prefixed: Vec<u8>) {
        if st.python_waiting == Some(fwd.slot) {
            st.python_waiting = None;
        }
        st.forwarded.push_back(fwd);
        self.to_broker.send(prefixed);
    }

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
            kind: Kind::Python,
        };
        self.forward_locked(&mut self.state(), fwd, prefixed);
        self.changed.notify_waiters();
        Ok(())
    }

    pub fn set_user(&self, user: &str) {
        self.state().user = Arc::from(user);
    }

    pub fn remember_unanswered(st: &mut ConnState, corr: i32) {
        if st.unanswered.insert(corr) {
            st.unanswered_order.push_back(corr);
        }
        if st.unanswered_order.len() > MAX_UNANSWERED {
            if let Some(old) = st.unanswered_order.pop_front() {
                st.unanswered.remove(&old);
            }
        }
    }

    // ------------------------------------------------------------------ quotas

    /// Records a request's proxy time (KIP-124 on proxy time) and returns its throttle.
    pub fn request_throttle(&self, key: i16, handle: Option<&Arc<ClientHandle>>, ns: u64) -> i32 {
        let shared = &self.shared;
        match handle {
            Some(h) if !shared.cfg.tables.is_exempt(key) => {
                let throttle = h.record_request_time(ns as f64, None).unwrap_or(0);
                self.log(h, ClientQuotaType::Request, ns as f64);
                throttle
            }
            _ => {
                let _ = shared.kernel.record_exempt_request_time(ns as f64, None);
                0
            }
        }
    }

    pub fn record(&self, h: &ClientHandle, t: ClientQuotaType, value: f64) -> i32 {
        h.record_and_get_throttle_time_ms(t, value, None).unwrap_or(0)
    }

    pub fn log(&self, h: &ClientHandle, t: ClientQuotaType, value: f64) {
        if self.shared.cfg.request_log {
            let user: Arc<str> = Arc::from(h.user());
            self.shared.log_request(&user, h.client_id(), t as u8, value);
        }
    }

    // ------------------------------------------------------------------ requests

    async fn read_requests(self: &Arc<Self>, mut rd: Reader) -> Result<(), String> {
        let shared = Arc::clone(&self.shared);
        let cfg = &shared.cfg;
        let mut handles = HandleCache::default();
        loop {
            self.to_broker.wait_below(BACKLOG).await;
            if let Some(d) = self.mute_delay() {
                tokio::time::sleep(d).await;
                continue;
            }
            let inflight = cfg.max_inflight;
            self.wait_until(|st| st.slots.len() < inflight).await;
            let stop = shared.stop.notified();
            tokio::pin!(stop);
            stop.as_mut().enable();
            if self.is_closed() || shared.stopping.load(Ordering::Acquire) {
                return Ok(());
            }
            let mut prefix = [0u8; 4];
            tokio::select! {
                r = read_prefix(&mut rd, &mut prefix) => if !r? { return Ok(()) },
                _ = &mut stop => return Ok(()),
            }
            let size = i32::from_be_bytes(prefix);
            if size < 0 || size as usize > cfg.max_frame_bytes {
                return Err(format!("frame of {size} bytes (limit {})", cfg.max_frame_bytes));
            }
            let size = size as usize;
            let head = if size >= STREAM_MIN { HEAD } else { size };
            let mut buf = vec![0u8; 4 + head];
            buf[..4].copy_from_slice(&prefix);
            rd.read_exact(&mut buf[4..])
                .await
                .map_err(io_err("connection closed inside a frame"))?;
            let mut rest = size - head;
            // A throttled answer may have gone out while this frame was read: the mute covers it.
            if let Some(d) = self.mute_delay() {
                tokio::time::sleep(d).await;
            }
            let t0 = Instant::now();
            let header = match parse_request_header(&buf[4..], &cfg.tables) {
                Ok(h) => h,
                Err(_) if rest > 0 => {
                    read_rest(&mut rd, &mut buf, &mut rest).await?;
                    parse_request_header(&buf[4..], &cfg.tables).map_err(|e| e.to_string())?
                }
                Err(e) => return Err(e.to_string()),
            };
            if rest > 0 && header.api_key != PRODUCE {
                read_rest(&mut rd, &mut buf, &mut rest).await?;
            }
            self.dispatch(&header, buf, rest, size, t0, &mut rd, &mut handles)
                .await?;
            let serial = self.state().serial_until.is_some_and(|u| Instant::now() < u);
            if serial {
                self.wait_until(|st| st.slots.is_empty()).await;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn dispatch(
        self: &Arc<Self>,
        h: &RequestHeader,
        mut buf: Vec<u8>,
        mut rest: usize,
        size: usize,
        t0: Instant,
        rd: &mut Reader,
        handles: &mut HandleCache,
    ) -> Result<(), String> {
        let shared = &self.shared;
        if shared.cfg.tables.is_python(h.api_key) {
            let slot = {
                let mut st = self.state();
                let slot = Self::push_slot(&mut st);
                st.python_waiting = Some(slot);
                slot
            };
            let ns = t0.elapsed().as_nanos() as u64;
            shared
                .bridge
                .on_request(self.id, slot, self.node, &buf[4..], ns)?;
            self.wait_until(|st| st.python_waiting != Some(slot)).await;
            return Ok(());
        }
        let user = Arc::clone(&self.state().user);
        let client = h.client_id(&buf[4..]);
        match h.api_key {
            PRODUCE => {
                let acks = match crate::produce::produce_acks(&buf[4..], h.body_offset, h.api_version) {
                    Ok(a) => a,
                    Err(_) if rest > 0 => {
                        read_rest(rd, &mut buf, &mut rest).await?;
                        crate::produce::produce_acks(&buf[4..], h.body_offset, h.api_version)
                            .map_err(|e| e.to_string())?
                    }
                    Err(e) => return Err(e.to_string()),
                };
                let client = h.client_id(&buf[4..]).to_owned();
                let handle = handles.get(shared, &user, &client)?;
                if acks == 0 {
                    // No answer, but recorded and muted in order; exempt from the request quota.
                    let throttle = self.record(&handle, ClientQuotaType::Produce, size as f64);
                    self.log(&handle, ClientQuotaType::Produce, size as f64);
                    let _ = shared
                        .kernel
                        .record_exempt_request_time(t0.elapsed().as_nanos() as f64, None);
                    let mut st = self.state();
                    let slot = Self::push_slot(&mut st);
                    self.settle_locked(&mut st, slot, None, throttle);
                    Self::remember_unanswered(&mut st, h.correlation_id);
                    self.to_broker.send(buf);
                } else {
                    let fwd = Fwd {
                        slot: 0,
                        corr: h.correlation_id,
                        key: h.api_key,
                        version: h.api_version,
                        ns: t0.elapsed().as_nanos() as u64,
                        kind: Kind::Produce { handle, size },
                    };
                    self.forward_new(fwd, buf);
                }
                if rest > 0 {
                    shared.counters.streamed_requests.fetch_add(1, Ordering::Relaxed);
                    self.pump_to_broker(rd, rest).await?;
                }
                Ok(())
            }
            FETCH => {
                let handle = handles.get(shared, &user, client)?;
                let kind = crate::fetch_path::on_request(self, h, &mut buf, handle)?;
                let fwd = Fwd {
                    slot: 0,
                    corr: h.correlation_id,
                    key: h.api_key,
                    version: h.api_version,
                    ns: t0.elapsed().as_nanos() as u64,
                    kind,
                };
                self.forward_new(fwd, buf);
                Ok(())
            }
            key => {
                let handle = if shared.cfg.tables.is_exempt(key) {
                    None
                } else {
                    Some(handles.get(shared, &user, client)?)
                };
                let fwd = Fwd {
                    slot: 0,
                    corr: h.correlation_id,
                    key,
                    version: h.api_version,
                    ns: t0.elapsed().as_nanos() as u64,
                    kind: Kind::Plain(handle),
                };
                self.forward_new(fwd, buf);
                Ok(())
            }
        }
    }

    /// A new slot for `fwd`, and the request sent.
    fn forward_new(&self, mut fwd: Fwd, prefixed: Vec<u8>) {
        let mut st = self.state();
        fwd.slot = Self::push_slot(&mut st);
        self.forward_locked(&mut st, fwd, prefixed);
    }

    /// Relays the rest of a streamed request, chunk by chunk, as the broker takes it.
    async fn pump_to_broker(&self, rd: &mut Reader, mut left: usize) -> Result<(), String> {
        while left > 0 {
            self.to_broker.wait_below(BACKLOG).await;
            if self.to_broker.failed() {
                return Err("the broker connection failed".into());
            }
            let n = left.min(CHUNK);
            let mut chunk = vec![0u8; n];
            rd.read_exact(&mut chunk)
                .await
                .map_err(io_err("connection closed inside a frame"))?;
            self.to_broker.send(chunk);
            left -= n;
        }
        Ok(())
    }

    // ------------------------------------------------------------------ responses

    async fn read_responses(self: &Arc<Self>, mut rd: Reader, up: &(String, u16)) -> Result<(), String> {
        let shared = Arc::clone(&self.shared);
        loop {
            self.to_client.wait_below(BACKLOG).await;
            let mut prefix = [0u8; 4];
            if !read_prefix(&mut rd, &mut prefix).await? {
                return Err(format!("broker {}:{} closed the connection", up.0, up.1));
            }
            let size = i32::from_be_bytes(prefix);
            if size < 4 {
                return Err(format!("a response of {size} bytes"));
            }
            let size = size as usize;
            let fetch_version = {
                let st = self.state();
                st.forwarded.front().and_then(|f| match f.kind {
                    Kind::Fetch(_) => Some(f.version),
                    _ => None,
                })
            };
            let streamable = fetch_version.is_some_and(|v| size >= STREAM_MIN || v >= 16);
            let head = if streamable { size.min(HEAD) } else { size };
            let mut buf = vec![0u8; 4 + head];
            buf[..4].copy_from_slice(&prefix);
            rd.read_exact(&mut buf[4..])
                .await
                .map_err(io_err("broker connection closed inside a frame"))?;
            let t0 = Instant::now();
            let corr = read_i32(&buf, 4).unwrap_or(0);
            let fwd = {
                let mut st = self.state();
                let expected = st.forwarded.front().map(|f| f.corr);
                if expected != Some(corr) && st.unanswered.remove(&corr) {
                    // Some brokers (tansu) answer acks=0 produce requests, which Kafka never
                    // does: the client expects nothing, so the answer is dropped.
                    None
                } else {
                    Some(
                        st.forwarded
                            .pop_front()
                            .ok_or("the broker sent a response nobody asked for")?,
                    )
                }
            };
            let Some(fwd) = fwd else {
                skip(&mut rd, size - head).await?;
                continue;
            };
            if fwd.corr != corr {
                return Err(format!(
                    "broker answered correlation id {corr}, expected {}",
                    fwd.corr
                ));
            }
            match &fwd.kind {
                Kind::Python => shared.bridge.on_response(self.id, fwd.slot, &buf[4..])?,
                Kind::Plain(handle) => {
                    let ns = fwd.ns + t0.elapsed().as_nanos() as u64;
                    let throttle = self.request_throttle(fwd.key, handle.as_ref(), ns);
                    if throttle > 0 && shared.cfg.tables.throttle_first(fwd.key, fwd.version) {
                        let at = crate::header::response_body_offset(
                            &buf[4..],
                            &shared.cfg.tables,
                            fwd.key,
                            fwd.version,
                        )
                        .map_err(|e| e.to_string())?;
                        patch_throttle(&mut buf, 4 + at, throttle);
                    }
                    self.settle(fwd.slot, Some(buf), throttle);
                }
                Kind::Produce {
                    handle,
                    size: req_size,
                } => {
                    let (handle, req_size) = (Arc::clone(handle), *req_size);
                    let buf = crate::produce_path::on_response(self, &fwd, &handle, req_size, buf, t0)?;
                    let (buf, throttle) = buf;
                    self.settle(fwd.slot, Some(buf), throttle);
                }
                Kind::Fetch(_) => crate::fetch_path::on_response(self, fwd, buf, size, &mut rd, t0).await?,
            }
        }
    }

    /// Returns once `slot` is the next answer due (a streamed answer goes straight out).
    pub async fn wait_at_head(&self, slot: u64) -> Result<(), String> {
        self.wait_until(|st| st.slots.front().map(|s| s.id) == Some(slot))
            .await;
        if self.is_closed() {
            return Err("closed".into());
        }
        Ok(())
    }
}

/// Raises `ThrottleTimeMs` at `at` (in a prefixed frame) to `throttle` if lower.
pub fn patch_throttle(buf: &mut [u8], at: usize, throttle: i32) {
    if let Some(old) = read_i32(buf, at) {
        if old < throttle {
            crate::wire::write_i32(buf, at, throttle);
        }
    }
}

/// Reads a size prefix; `false` at a clean end of stream.
async fn read_prefix(rd: &mut Reader, prefix: &mut [u8; 4]) -> Result<bool, String> {
    let mut got = 0;
    while got < 4 {
        let n = rd.read(&mut prefix[got..]).await.map_err(io_err("read failed"))?;
        if n == 0 {
            if got == 0 {
                return Ok(false);
            }
            return Err("connection closed inside a size prefix".into());
        }
        got += n;
    }
    Ok(true)
}

async fn read_rest(rd: &mut Reader, buf: &mut Vec<u8>, rest: &mut usize) -> Result<(), String> {
    let at = buf.len();
    buf.resize(at + *rest, 0);
    rd.read_exact(&mut buf[at..])
        .await
        .map_err(io_err("connection closed inside a frame"))?;
    *rest = 0;
    Ok(())
}

/// Reads and drops `n` bytes.
pub async fn skip(rd: &mut Reader, mut n: usize) -> Result<(), String> {
    let mut scratch = vec![0u8; n.min(CHUNK)];
    while n > 0 {
        let k = n.min(scratch.len());
        rd.read_exact(&mut scratch[..k])
            .await
            .map_err(io_err("connection closed inside a frame"))?;
        n -= k;
    }
    Ok(())
}
