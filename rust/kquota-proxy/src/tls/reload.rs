//! Configurations rebuilt when their files change, as Kafka brokers pick up a renewed keystore
//! without a restart. The data plane asks `current()` for each new connection and hands the
//! `Arc` to tokio-rustls; a connection keeps the configuration it was accepted with, so only new
//! connections see a new certificate.
//!
//! The files are checked at most once per interval (default 5 s), by the caller of `current()`
//! that finds the check due (one atomic compare-exchange decides who; the others use the current
//! configuration without waiting). A change is the modification time, the length or the
//! contents' hash. A rebuild that fails (a file half written, a wrong new password) keeps the
//! previous configuration and is counted; it is retried when the files change again.

use super::client::client_config;
use super::server::server_config;
use super::settings::{ListenerTlsSettings, UpstreamTlsSettings};
use super::{material, TlsConfigError};
use rustls::{ClientConfig, ServerConfig};
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

/// How often the files are looked at, at most.
pub const DEFAULT_RELOAD_CHECK: Duration = Duration::from_secs(5);

type Build<C> = Box<dyn Fn() -> Result<C, TlsConfigError> + Send + Sync>;

#[derive(Clone, PartialEq, Eq, Debug)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    hash: u64,
}

fn stamp(path: &PathBuf) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    let bytes = std::fs::read(path).ok()?;
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        hash: hasher.finish(),
    })
}

/// Reload counters, for the proxy's metrics and logs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadStats {
    /// Successful rebuilds after a change.
    pub reloads: u64,
    /// Rebuilds that failed (the previous configuration stayed).
    pub failures: u64,
    /// The last failure, one line (cleared by a successful reload).
    pub last_error: Option<String>,
}

/// A configuration (`ServerConfig` or `ClientConfig`) kept current with its files.
pub struct Reloading<C> {
    build: Build<C>,
    files: Vec<PathBuf>,
    interval: Duration,
    epoch: Instant,
    next_check_ms: AtomicU64,
    current: RwLock<Arc<C>>,
    stamps: Mutex<Vec<Option<Stamp>>>,
    stats: Mutex<ReloadStats>,
}

impl Reloading<ServerConfig> {
    /// A listener's configuration, reloaded when its keystore or truststore file changes.
    pub fn server(settings: ListenerTlsSettings, interval: Duration) -> Result<Self, TlsConfigError> {
        let mut files = material::keystore_files(&settings.keystore);
        if let Some(ts) = &settings.truststore {
            files.extend(material::truststore_files(ts));
        }
        Reloading::new(files, interval, Box::new(move || server_config(&settings)))
    }
}

impl Reloading<ServerConfig> {
    /// A tokio-rustls acceptor with the current configuration (for one accepted connection).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.current())
    }
}

impl Reloading<ClientConfig> {
    /// A tokio-rustls connector with the current configuration (for one new connection).
    pub fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.current())
    }
}

impl Reloading<ClientConfig> {
    /// The upstream configuration, reloaded when its truststore or keystore file changes.
    pub fn client(settings: UpstreamTlsSettings, interval: Duration) -> Result<Self, TlsConfigError> {
        let mut files = Vec::new();
        if let Some(ts) = &settings.truststore {
            files.extend(material::truststore_files(ts));
        }
        if let Some(ks) = &settings.keystore {
            files.extend(material::keystore_files(ks));
        }
        Reloading::new(files, interval, Box::new(move || client_config(&settings)))
    }
}

impl<C> Reloading<C> {
    /// Builds the configuration now (an error here is a start-up error) and watches `files`.
    pub fn new(files: Vec<PathBuf>, interval: Duration, build: Build<C>) -> Result<Self, TlsConfigError> {
        // Stamps first: a change between the stamp and the build is then seen at the next check.
        let stamps = files.iter().map(stamp).collect();
        let first = build()?;
        let epoch = Instant::now();
        Ok(Reloading {
            build,
            files,
            interval,
            epoch,
            next_check_ms: AtomicU64::new(interval.as_millis() as u64),
            current: RwLock::new(Arc::new(first)),
            stamps: Mutex::new(stamps),
            stats: Mutex::new(ReloadStats::default()),
        })
    }

    /// The configuration for a new connection (checks the files first when a check is due).
    pub fn current(&self) -> Arc<C> {
        let now = self.epoch.elapsed().as_millis() as u64;
        let due = self.next_check_ms.load(Ordering::Relaxed);
        if now >= due
            && self
                .next_check_ms
                .compare_exchange(
                    due,
                    now + self.interval.as_millis() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            let _ = self.check_now();
        }
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Looks at the files now: Ok(true) when they changed and the configuration was rebuilt,
    /// Ok(false) when nothing changed, Err when the rebuild failed (the previous one stays).
    pub fn check_now(&self) -> Result<bool, TlsConfigError> {
        let fresh: Vec<Option<Stamp>> = self.files.iter().map(stamp).collect();
        {
            let mut stamps = self.stamps.lock().unwrap_or_else(|e| e.into_inner());
            if *stamps == fresh {
                return Ok(false);
            }
            // Recorded before the rebuild: a failed one is not retried until the files change again.
            *stamps = fresh;
        }
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        match (self.build)() {
            Ok(config) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
                stats.reloads += 1;
                stats.last_error = None;
                Ok(true)
            }
            Err(e) => {
                stats.failures += 1;
                stats.last_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// The watched files.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Reloads and failures so far.
    pub fn stats(&self) -> ReloadStats {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
