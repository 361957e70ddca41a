//! The data plane's way back into Python: `kquota_proxy::Bridge` over the bridge object
//! `kquota.proxy.server` hands `ProxyDataPlane`, whose methods only hand work to its event loop.
//! The runtime's threads take the GIL for each call.

use kquota_proxy::header::RequestHeader;
use kquota_proxy::Bridge;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

pub(crate) struct PyBridge {
    pub(crate) obj: Py<PyAny>,
}

impl PyBridge {
    fn call(
        &self,
        name: &str,
        make: impl FnOnce(Python<'_>) -> PyResult<Bound<'_, pyo3::types::PyTuple>>,
    ) -> Result<(), String> {
        Python::attach(|py| {
            let result = make(py).and_then(|args| self.obj.call_method1(py, name, args));
            result.map(|_| ()).map_err(|e| {
                let msg = format!("the proxy's {name} failed: {e}");
                e.write_unraisable(py, Some(self.obj.bind(py)));
                msg
            })
        })
    }
}

impl Bridge for PyBridge {
    fn on_request(
        &self,
        conn: u64,
        slot: u64,
        node: i32,
        header: &RequestHeader,
        frame: &[u8],
        ns: u64,
    ) -> Result<(), String> {
        self.call("on_request", |py| {
            // The header as the data plane parsed it: (api key, version, correlation id,
            // client id, body offset), the fields of `kquota.kafka.protocol.frames.RequestHeader`.
            let parsed = (
                header.api_key,
                header.api_version,
                header.correlation_id,
                header.client_id(frame),
                header.body_offset,
            )
                .into_pyobject(py)?
                .into_any();
            pyo3::types::PyTuple::new(
                py,
                [
                    conn.into_pyobject(py)?.into_any(),
                    slot.into_pyobject(py)?.into_any(),
                    node.into_pyobject(py)?.into_any(),
                    PyBytes::new(py, frame).into_any(),
                    ns.into_pyobject(py)?.into_any(),
                    parsed,
                ],
            )
        })
    }

    fn on_response(&self, conn: u64, slot: u64, frame: &[u8]) -> Result<(), String> {
        self.call("on_response", |py| {
            pyo3::types::PyTuple::new(
                py,
                [
                    conn.into_pyobject(py)?.into_any(),
                    slot.into_pyobject(py)?.into_any(),
                    PyBytes::new(py, frame).into_any(),
                ],
            )
        })
    }

    fn on_close(&self, conn: u64, reason: Option<String>) {
        let _ = self.call("on_close", |py| {
            pyo3::types::PyTuple::new(
                py,
                [
                    conn.into_pyobject(py)?.into_any(),
                    reason.into_pyobject(py)?.into_any(),
                ],
            )
        });
    }
}
