"""The standing guard: every public call of ``QuotaManager``, ``ClientHandle``, the
stores and the CLI, driven with arbitrary values of every Python type, lets only ``TypeError``
or a ``KQuotaError`` escape (the CLI: an exit status and one line, never a traceback), never
panics, and leaves the state unchanged when it refuses a call."""

from __future__ import annotations

import contextlib
import io
import math
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kquota
from kquota import ClientQuotaType as Q
from kquota import KQuotaError
from kquota.cli import main as cli_main
from kquota.response import response_throttle
from kquota.stores import open_store
from kquota.stores.sqlite import SQLiteConfigStore

GUARD = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

names = st.one_of(
    st.text(alphabet=st.characters(categories=["L", "N", "P", "Cc", "Cs", "Zs"]), max_size=12),
    st.sampled_from(["\x02evil", "\x01callback-failed", "a\x00b", "\udc80", "é" * 20_000, "x" * 100_000, ""]),
)
numbers = st.one_of(
    st.booleans(),
    st.integers(),
    st.sampled_from([2**63 - 1, 2**63, -(2**63), 2**64, 10**400, -(10**400), 2**31, 0, 1, -1]),
    st.floats(allow_nan=True, allow_infinity=True),
)
others = st.one_of(
    st.none(),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.builds(object),
    st.sampled_from(list(Q.members()) + ["PRODUCE", "fetch", "Request", 0, 3, 4, 1.5]),
)
anything = st.one_of(numbers, names, others)
#: Mostly plausible arguments (so calls get past the first check), sometimes anything.
arg = st.one_of(anything, st.sampled_from([Q.PRODUCE, Q.FETCH, Q.REQUEST, Q.CONTROLLER_MUTATION, "u", "c", 100, 0,
                                           "127.0.0.1", "::1", "EXTERNAL", {"max.connections.per.ip": 1}]))
entity = st.one_of(
    st.fixed_dictionaries({"user": st.one_of(st.none(), names)}),
    st.fixed_dictionaries({"client-id": st.one_of(st.none(), names)}),
    st.fixed_dictionaries({"user": st.one_of(st.none(), names), "client-id": st.one_of(st.none(), names)}),
    st.fixed_dictionaries({"ip": st.one_of(st.none(), names, st.sampled_from(["10.0.0.1", "::1", "::ffff:1.2.3.4"]))}),
    st.fixed_dictionaries({"ip": st.sampled_from(["10.0.0.1", None]), "user": st.one_of(st.none(), names)}),
    anything,
)
ops = st.one_of(
    st.dictionaries(
        st.one_of(st.sampled_from(kquota.manager.CONFIG_KEYS + ("connection_creation_rate",)), st.text(max_size=4)),
        st.one_of(st.none(), numbers, names),
        max_size=3,
    ),
    anything,
)
entries = st.one_of(st.lists(st.tuples(entity, ops), max_size=3), anything)

MANAGER_CALLS = {
    "record_and_get_throttle_time_ms": 5,
    "record_no_throttle": 5,
    "unrecord": 5,
    "quota_metric_tags": 3,
    "quota_limit": 3,
    "max_value_in_quota_window": 3,
    "measured_rate": 4,
    "record_request_time": 4,
    "record_network_thread_time": 4,
    "record_exempt_request_time": 2,
    "exempt_request_rate": 1,
    "record_controller_mutations": 5,
    "controller_mutation_tokens": 3,
    "client": 2,
    "metrics": 2,
    "utilization": 2,
    "expire_sensors": 1,
    "sensor_stats": 1,
    "sensor_count": 1,
    "signal_quota_reset": 1,
    "update_cluster_metadata": 1,
    "delay_queue": 1,
    "delay_queue_metrics": 0,
    "extra_metrics": 0,
    # KIP-612 connection quotas
    "record_connection": 3,
    "record_connection_accept": 2,
    "release_connection": 2,
    "connection_count": 1,
    "connection_rate_for_ip": 1,
    "connection_slot_available": 1,
    "configure_connections": 1,
    "connection_limits": 0,
    "connection_metrics": 1,
}
HANDLE_CALLS = {
    "record_and_get_throttle_time_ms": 3,
    "record_no_throttle": 3,
    "unrecord": 3,
    "record_request_time": 2,
    "record_network_thread_time": 2,
    "record_controller_mutations": 3,
    "controller_mutation_tokens": 1,
    "quota_metric_tags": 1,
    "quota_limit": 1,
    "max_value_in_quota_window": 1,
    "measured_rate": 2,
}


def new_manager():
    qm = kquota.QuotaManager(expiry_interval_seconds=None)
    qm.alter_client_quotas(
        [
            ({"client-id": None}, {"producer_byte_rate": 1000, "request_percentage": 50, "controller_mutation_rate": 5}),
            ({"user": "u"}, {"consumer_byte_rate": 2000}),
            ({"ip": None}, {"connection_creation_rate": 5}),
        ]
    )
    qm.record_no_throttle(Q.PRODUCE, "u", "c", 10, now_ms=0)
    qm.record_connection("127.0.0.1", now_ms=0)
    return qm


def fingerprint(qm):
    """Everything a refused call must leave as it was."""
    types = list(Q.members())
    return (
        qm.describe_client_quotas(),
        [qm.sensor_stats(t) for t in types],
        qm.callback_errors,
        sorted((m.group, m.name, tuple(sorted(m.tags.items())), repr(m.value)) for m in qm.metrics(now_ms=0)),
        sorted((m.group, m.name, tuple(sorted(m.tags.items())), repr(m.value)) for m in qm.connection_metrics(0)),
        qm.connection_limits(),
    )


def refused(call):
    """Runs ``call``; True if it refused with an allowed error, False if it succeeded."""
    try:
        call()
    except (TypeError, KQuotaError):
        return True
    return False  # anything else (a PanicException is a BaseException) propagates and fails


@GUARD
@given(st.sampled_from(sorted(MANAGER_CALLS)), st.lists(arg, min_size=0, max_size=6), st.data())
def test_quota_manager_calls(name, args, data):
    qm = new_manager()
    try:
        n = MANAGER_CALLS[name]
        args = args[:n] if data.draw(st.booleans()) else args  # sometimes too many arguments
        if name == "record_controller_mutations" and len(args) == 5:
            args[4] = data.draw(st.one_of(st.booleans(), anything))
        before = fingerprint(qm)
        if refused(lambda: getattr(qm, name)(*args)):
            assert fingerprint(qm) == before, name
    finally:
        qm.close()


@GUARD
@given(entries, anything)
def test_alter_client_quotas(raw, validate_only):
    qm = new_manager()
    try:
        before = fingerprint(qm)
        if refused(lambda: qm.alter_client_quotas(raw, validate_only=validate_only)):
            assert fingerprint(qm) == before
    finally:
        qm.close()


@GUARD
@given(st.sampled_from(sorted(HANDLE_CALLS)), st.lists(arg, max_size=4), names, names)
def test_client_handle_calls(name, args, user, client_id):
    qm = new_manager()
    try:
        try:
            h = qm.client(user, client_id)
        except (TypeError, KQuotaError):
            return
        before = fingerprint(qm)
        if refused(lambda: getattr(h, name)(*args[: HANDLE_CALLS[name]])):
            assert fingerprint(qm) == before, name
    finally:
        qm.close()


CONSTRUCTOR_ARGS = [
    "window_num", "window_size_seconds", "num_io_threads", "num_network_threads", "producer_default",
    "consumer_default", "callback_failure", "metrics_num_samples", "metrics_sample_window_ms",
    "controller_window_num", "controller_window_size_seconds", "sensor_expiry_seconds", "max_sensors",
    "expiry_interval_seconds", "max_name_bytes", "max_client_ids_per_principal", "callback_configs",
]


@GUARD
@given(st.dictionaries(st.sampled_from(CONSTRUCTOR_ARGS), anything, max_size=3))
def test_constructor(kwargs):
    kwargs.setdefault("expiry_interval_seconds", None)
    qm = None
    try:
        qm = kquota.QuotaManager(**kwargs)
    except (TypeError, KQuotaError):
        pass
    finally:
        if qm is not None:
            qm.close()


@GUARD
@given(anything, anything, anything)
def test_response_throttle(a, b, c):
    refused(lambda: response_throttle(a, b, c))


STORE_DIR = tempfile.mkdtemp(prefix="kquota-guard-")
STORE = SQLiteConfigStore(os.path.join(STORE_DIR, "guard.db"))
STORE.alter([({"user": "u"}, {"producer_byte_rate": 10})])
CLI_STORE = SQLiteConfigStore(os.path.join(STORE_DIR, "cli.db"))


@GUARD
@given(entries, st.one_of(st.none(), st.lists(entity, max_size=3), anything))
def test_sqlite_store_calls(raw, wanted):
    before = STORE.describe()
    if refused(lambda: STORE.alter(raw)):
        assert STORE.describe() == before
    refused(lambda: STORE.describe(wanted))


@GUARD
@given(st.one_of(numbers, others, names.filter(lambda s: "://" not in s)))
def test_open_store_urls(url):
    # A plain path names a SQLite file (docs/store-urls.md): what it creates lands in a scratch
    # directory, with ~ pointing there too.
    scratch = tempfile.mkdtemp(dir=STORE_DIR)
    here, home = os.getcwd(), os.environ.get("HOME")
    os.chdir(scratch)
    os.environ["HOME"] = scratch
    store = None
    try:
        store = open_store(url)
    except (TypeError, KQuotaError):
        pass
    finally:
        if store is not None:
            store.close()
        os.chdir(here)
        if home is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = home


CLI_OPTIONS = [
    "--describe", "--alter", "--add-config", "--delete-config", "--entity-type", "--entity-name",
    "--entity-default", "--json", "users", "clients", "producer_byte_rate=100", "consumer_byte_rate=x",
    "request_percentage=1e400", "producer_byte_rate", "controller_mutation_rate=-1",
]
cli_tokens = st.one_of(
    st.sampled_from(CLI_OPTIONS),
    names.filter(lambda s: "\x00" not in s and "://" not in s and s not in ("-", "--store", "--quota-file")),
)


@GUARD
@given(st.lists(cli_tokens, max_size=7))
def test_cli_configs(tokens):
    argv = ["configs", "--store", "sqlite:///" + CLI_STORE.path, *tokens]
    before = CLI_STORE.describe()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = cli_main(argv)
        except SystemExit as e:  # argparse's refusal: usage and exit status 2
            status = e.code
    assert isinstance(status, int)
    assert "Traceback" not in err.getvalue()
    if status != 0:
        assert CLI_STORE.describe() == before


def test_the_guard_covers_every_public_call():
    public = {n for n in dir(kquota.QuotaManager) if not n.startswith("_") and callable(getattr(kquota.QuotaManager, n))}
    covered = set(MANAGER_CALLS) | {"alter_client_quotas", "describe_client_quotas", "close", "set_callback",
                                    "add_metrics_source", "remove_metrics_source", "record_throttle_time"}
    assert public - covered <= {"members"}, public - covered
    assert math.isfinite(len(public))
