"""Shared fixtures.

`kquota` is imported lazily (inside fixtures) so that the oracle-only tests can run while the
package is not built; tests that need kquota fail with an ImportError in that case.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "support"))

from oracle import OracleQuotaManager, ThrottlingQuotaExceeded  # noqa: E402


class Impl:
    """One implementation under test: builds managers and names the quota types."""

    def __init__(self, name, factory, produce, fetch, request=None, controller_mutation=None,
                 throttling_error=None):
        self.name = name
        self._factory = factory
        self.PRODUCE = produce
        self.FETCH = fetch
        self.REQUEST = request
        self.CONTROLLER_MUTATION = controller_mutation
        # what a strict controller-mutation rejection raises
        self.ThrottlingError = throttling_error

    def make(self, **kwargs):
        return self._factory(**kwargs)

    def qtype(self, name):
        return {"PRODUCE": self.PRODUCE, "FETCH": self.FETCH, "REQUEST": self.REQUEST,
                "CONTROLLER_MUTATION": self.CONTROLLER_MUTATION}[name]

    def __repr__(self):
        return self.name


def _kquota_impl():
    import kquota

    Q = kquota.ClientQuotaType
    return Impl("kquota", kquota.QuotaManager, Q.PRODUCE, Q.FETCH, Q.REQUEST,
                Q.CONTROLLER_MUTATION, kquota.ThrottlingQuotaExceededError)


def _oracle_impl():
    return Impl("oracle", OracleQuotaManager, "PRODUCE", "FETCH", "REQUEST",
                "CONTROLLER_MUTATION", ThrottlingQuotaExceeded)


@pytest.fixture
def kq():
    """The kquota package."""
    import kquota

    return kquota


def close_managers(made) -> None:
    """Closes each manager of ``made`` that has a ``close`` (the oracle's has none)."""
    for m in made:
        close = getattr(m, "close", None)
        if close is not None:
            close()


def closing_factory(make):
    """The body of a factory fixture (``yield from closing_factory(make)``): yields a factory
    that makes managers with ``make(**kwargs)``, then closes every one it made at teardown."""
    made = []

    def factory(**kwargs):
        m = make(**kwargs)
        made.append(m)
        return m

    yield factory
    close_managers(made)


@pytest.fixture
def qm(kq):
    """A fresh kquota.QuotaManager with default settings."""
    m = kq.QuotaManager()
    yield m
    close_managers([m])


@pytest.fixture
def make_qm(kq):
    """Factory for kquota.QuotaManager with custom arguments (closed at teardown)."""
    yield from closing_factory(kq.QuotaManager)


@pytest.fixture
def oracle():
    return OracleQuotaManager()


@pytest.fixture(params=["kquota", "oracle"])
def impl(request):
    """Parametrizes a test over the kquota kernel and the pure-Python oracle."""
    return _kquota_impl() if request.param == "kquota" else _oracle_impl()


@pytest.fixture(params=["PRODUCE", "FETCH"])
def qt_name(request):
    """The byte-rate quota type name under test."""
    return request.param


BYTE_KEY = {"PRODUCE": "producer_byte_rate", "FETCH": "consumer_byte_rate"}
OTHER = {"PRODUCE": "FETCH", "FETCH": "PRODUCE"}


@pytest.fixture
def key(qt_name):
    """The config key of the quota type under test."""
    return BYTE_KEY[qt_name]


@pytest.fixture(scope="module")
def broker(kafka_broker):
    """The session's Apache Kafka broker, its PLAINTEXT listener (``kafka_broker.Listener``:
    ``.port``, ``.address``), for a module's proxy tests. Shared by the whole session: tests
    use topics and groups of their own, and nothing stops it here."""
    return kafka_broker.listener("PLAINTEXT")


@pytest.fixture(params=["sqlite", "zookeeper", "kafka"])
def store(request, tmp_path):
    """A fresh, open store of each kind in turn (SQLite always; ZooKeeper with a live server;
    Kafka on Apache Kafka's broker), closed after the test."""
    from store_helpers import store_url

    from kquota.stores import open_store

    s = open_store(store_url(request.param, tmp_path, request))
    yield s
    s.close()


@pytest.fixture(scope="module")
def proxy(broker):
    """A proxy in front of the module's ``broker`` (a module that needs other options defines
    its own)."""
    from proxy_support import ProxyThread

    p = ProxyThread(("127.0.0.1", broker.port))
    yield p
    p.stop()


@pytest.fixture(scope="session")
def spark():
    """One Spark session for every pipeline test (starting one costs seconds): local[2], no UI,
    two shuffle partitions."""
    from kquota.pipeline.session import get_spark

    session = get_spark("local[2]", app_name="kquota-tests",
                        **{"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield session
    session.stop()


# Under CI=true a test skipped because a module is missing fails instead: the test command
# installs the `test` extra into a fresh environment, so a missing import there is a missing
# install step, not an optional feature.
_CI = os.environ.get("CI", "").lower() == "true"


def _fail_if_import_skip(rep):
    if _CI and rep.skipped and isinstance(rep.longrepr, tuple) and "could not import" in str(rep.longrepr[2]):
        rep.outcome = "failed"
        rep.longrepr = f"CI=true: {rep.longrepr[2]} (add the package to the `test` extra in pyproject.toml)"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_if_import_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_if_import_skip(outcome.get_result())


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA and every certificate the TLS tests use (``tls_support.make_pki``), per module."""
    from tls_support import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def kafka_broker():
    """Apache Kafka's broker (``kafka_broker.KafkaBroker``): scripts/test.sh's, or one started for
    this session by scripts/kafka.sh. Skips without the jars (fails under CI=true)."""
    from kafka_broker import session_broker

    broker = session_broker()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def kafka_cluster3():
    """Apache Kafka with one controller and three brokers (``scripts/kafka.sh start --brokers 3``):
    scripts/test.sh's (``KQUOTA_TEST_KAFKA3_DIR``, shared by every worker), or one started for
    this session when a test that needs several partition leaders first asks for it."""
    from kafka_broker import session_broker

    cluster = session_broker(brokers=3)
    yield cluster
    cluster.stop()


def pytest_itemcollected(item):
    """Markers and xdist groups (``scheduling``): ``process`` from the fixtures a test takes;
    ``timing`` and ``heavy`` tests one at a time; the rest grouped by module. Given as each item
    is collected, so that pytest-xdist's ``loadgroup`` (which reads the groups in its own
    ``pytest_collection_modifyitems``) sees them."""
    from scheduling import classify

    classify([item], item.config.rootpath)


@pytest.fixture(autouse=True)
def _processes_need_the_process_marker(request, monkeypatch):
    from scheduling import guard_subprocess

    guard_subprocess(request.node, monkeypatch)
