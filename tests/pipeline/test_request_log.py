"""The request log's one schema (kquota.request_log_schema, docs/pipeline.md): the proxy's
writer writes it, the pipeline's reader and simulate take their columns from it."""

from __future__ import annotations

import pytest
from kquota import request_log_schema
from kquota.pipeline import schema, simulate
from kquota.proxy.request_log_writer import RequestLogWriter

pq = pytest.importorskip("pyarrow.parquet")


def test_the_schema_is_the_spec():
    assert request_log_schema.COLUMNS == ("ts_ms", "broker", "user", "client_id", "quota_type", "value")
    assert request_log_schema.REQUIRED == ("ts_ms", "user", "client_id", "quota_type", "value")  # broker optional
    assert request_log_schema.DEFAULTS == {"broker": 0}
    assert request_log_schema.QUOTA_TYPES == ("PRODUCE", "FETCH", "REQUEST")
    assert request_log_schema.OBSERVED_COLUMNS == ("throttle_time_ms", "shadow_throttle_time_ms", "shadow_delayed_bytes")
    assert [(f.name, str(f.type)) for f in request_log_schema.arrow_schema()] == [
        ("ts_ms", "int64"), ("broker", "int32"), ("user", "string"), ("client_id", "string"),
        ("quota_type", "string"), ("value", "double"), ("topic", "string"), ("throttle_time_ms", "int32"),
        ("shadow_throttle_time_ms", "int32"), ("shadow_delayed_bytes", "int64")]
    assert request_log_schema.SIMULATED_COLUMNS == request_log_schema.COLUMNS + ("throttle_ms",)


def test_writer_reader_and_simulate_share_it(tmp_path):
    log = RequestLogWriter(str(tmp_path), rotate_seconds=600)
    try:
        log.add(1_700_000_000_000, "alice", "app", "PRODUCE", 512)
        log.add(1_700_000_000_001, "bob", "", "REQUEST", 1e6, 30, 120, 4096)
    finally:
        log.close()
    (written,) = sorted(tmp_path.glob("*.parquet"))
    table = pq.read_table(written)
    assert table.schema.equals(request_log_schema.arrow_schema())
    assert table.to_pylist()[0] == {"ts_ms": 1_700_000_000_000, "broker": 0, "user": "alice", "client_id": "app",
                                    "quota_type": "PRODUCE", "value": 512.0, "topic": None, "throttle_time_ms": 0,
                                    "shadow_throttle_time_ms": None, "shadow_delayed_bytes": None}
    assert table.to_pylist()[1]["shadow_throttle_time_ms"] == 120 and table.to_pylist()[1]["shadow_delayed_bytes"] == 4096
    # The reader and simulate hold no copy: the same objects.
    assert schema.COLUMNS is request_log_schema.COLUMNS and schema.REQUIRED is request_log_schema.REQUIRED
    assert schema.QUOTA_TYPES is request_log_schema.QUOTA_TYPES and simulate.COLUMNS is request_log_schema.COLUMNS
    assert schema.RequestLogReader.__name__ == "RequestLogReader"
