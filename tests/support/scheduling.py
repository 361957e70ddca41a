"""What kind of test each test is, for ``scripts/test.sh``'s scheduling and the inner loop.

Markers (declared in pyproject.toml):

- ``process``: the test starts or talks to another process (a broker, ZooKeeper, Spark, a
  ``kquota`` subprocess). Given to every test that takes one of :data:`PROCESS_FIXTURES` or is
  parametrized with a store kind in :data:`SERVER_STORES` (its store URL is made at run time,
  ``store_helpers.store_url``, so no fixture names the server at collection), and set
  by hand (``pytestmark = pytest.mark.process``) on modules that start processes themselves. A test
  without it that starts a subprocess fails, naming the marker (:func:`guard_subprocess`), so
  ``bash scripts/test.sh -m "not process"`` is a true inner loop.
- ``timing``: the test asserts a rate or a time measured in its own run (throttled clients, a
  fleet's shares, idle timeouts). Under ``pytest -n`` they run one at a time on one worker
  (xdist group ``alone``), never beside another of their kind.
- ``heavy``: the test keeps both cores busy for a while (a wheel build, a Spark cluster): it runs
  in the ``alone`` group too, so that it never starves a ``timing`` test of CPU.

Every other test is grouped by its module (module-scoped brokers and proxies are started once),
and the Spark tests by the Spark session they share.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

#: Fixtures that start (or attach to) another process.
PROCESS_FIXTURES = frozenset({
    "broker", "proxy", "kafka_broker", "kafka_cluster3", "spark", "zk", "zk_hosts", "tansu",
})
#: Store kinds a parametrized test's store lives in a server of: ZooKeeper, or Kafka's broker.
SERVER_STORES = frozenset({"zookeeper", "kafka"})
ALONE = "alone"


def _needs_a_server(item) -> bool:
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    return any(isinstance(v, str) and v in SERVER_STORES for v in params)


def classify(items: list, root: Path) -> None:
    """Adds ``process`` where a process fixture is used, and the xdist group of each item."""
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())) or _needs_a_server(item):
            item.add_marker(pytest.mark.process)
        if item.get_closest_marker("timing") or item.get_closest_marker("heavy"):
            group = ALONE
        elif "spark" in getattr(item, "fixturenames", ()):
            group = "spark"  # one Spark session per worker is already seconds and a JVM
        else:
            group = Path(str(item.fspath)).relative_to(root).as_posix()
        item.add_marker(pytest.mark.xdist_group(group))


_real_popen_init = subprocess.Popen.__init__


def guard_subprocess(item, monkeypatch) -> None:
    """A test not marked ``process`` may not start one: the inner loop (``-m "not process"``)
    must stay free of processes, so a missing marker fails here, not by slowing that loop."""
    if item.get_closest_marker("process"):
        return
    nodeid = item.nodeid

    def refuse(self, args, *a, **k):
        raise AssertionError(f"{nodeid} starts a process ({args!r}): mark it `process` "
                             "(pytestmark = pytest.mark.process)")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
