"""Fixtures of the configuration tests."""

from __future__ import annotations

import pytest
from store_helpers import store_url

from kquota.stores import open_store

#: Every store kind: SQLite always; ZooKeeper with a live server; Kafka on Apache Kafka's broker.
STORE_KINDS = ["sqlite", "zookeeper", "kafka"]


@pytest.fixture(params=STORE_KINDS)
def store(request, tmp_path):
    """A fresh, open store of each kind in turn (closed after the test)."""
    s = open_store(store_url(request.param, tmp_path, request))
    yield s
    s.close()
