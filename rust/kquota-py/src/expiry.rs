//! The kernel object's background sensor-expiry thread (`quota_core::ExpiryTask`): started by
//! the constructor unless `expiry_interval_seconds=None`, stopped by `close()`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use quota_core::{ExpiryTask, QuotaKernel};

/// At most one running expiry thread.
#[derive(Default)]
pub struct ExpiryThread(Mutex<Option<ExpiryTask>>);

impl ExpiryThread {
    /// Starts the thread (replacing a running one), `interval_ms` apart.
    pub fn start(&self, kernel: &Arc<QuotaKernel>, interval_ms: i64) -> PyResult<()> {
        let task = ExpiryTask::start(kernel, Duration::from_millis(interval_ms as u64)).map_err(|e| {
            pyo3::exceptions::PyOSError::new_err(format!("cannot start the sensor expiry thread: {e}"))
        })?;
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        Ok(())
    }

    /// Stops the thread, waiting for a pass in progress with the GIL released; no-op if none.
    pub fn stop(&self, py: Python<'_>) {
        let task = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut t) = task {
            py.detach(move || t.stop());
        }
    }

    pub fn is_running(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(ExpiryTask::is_running)
    }
}
