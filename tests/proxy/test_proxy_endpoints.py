"""KIP-951 NodeEndpoints through the proxy: a broker address in a Produce
v10+ or Fetch v16+ answer becomes the proxy's own listener for that broker — in a Produce
answer (held whole, rewritten freely), a small Fetch answer (held whole) and a large one
(streamed: its size prefix has gone out, so the section is fitted to its old length) — and the
records pass byte for byte. The broker is ``proxy_fakes.EndpointsBroker``: Kafka's broker names
NodeEndpoints only after a leadership change, not in every answer on demand."""

from __future__ import annotations

import logging
import socket

import pytest

from proxy_fakes import EndpointsBroker
from proxy_support import ProxyThread
from proxy_wire import Wire


@pytest.fixture(scope="module")
def endpoints_proxy():
    broker = EndpointsBroker()
    proxy = ProxyThread(("127.0.0.1", broker.port))
    yield proxy
    proxy.stop()
    broker.stop()


def _check_rewritten(proxy: ProxyThread, endpoints: list) -> None:
    assert [e["NodeId"] for e in endpoints] == [EndpointsBroker.NODE]
    host, port = endpoints[0]["Host"], endpoints[0]["Port"]
    assert EndpointsBroker.HOST not in host
    assert (host, port) == ("127.0.0.1", proxy.proxy.broker_ports[EndpointsBroker.NODE])
    socket.create_connection((host, port), timeout=5).close()  # the proxy listens there


def test_produce_answer_names_the_proxy(endpoints_proxy):
    w = Wire(endpoints_proxy.proxy.bootstrap_address)
    try:
        answer = w.call(0, 10, "Produce", {"TransactionalId": None, "Acks": 1, "TimeoutMs": 1000, "TopicData": []})
    finally:
        w.close()
    assert answer["Responses"][0]["PartitionResponses"][0]["BaseOffset"] == 5
    _check_rewritten(endpoints_proxy, answer["NodeEndpoints"])


@pytest.mark.parametrize("size", [1_000, 300_000])
def test_fetch_answer_names_the_proxy_records_intact(endpoints_proxy, size):
    streamed_before = endpoints_proxy.proxy.streamed_responses
    w = Wire(endpoints_proxy.proxy.bootstrap_address)
    try:
        answer = w.call(1, 16, "Fetch", {
            "MaxWaitMs": 0, "MinBytes": 1, "MaxBytes": size, "IsolationLevel": 0, "SessionId": 0,
            "SessionEpoch": -1, "Topics": [], "ForgottenTopicsData": [], "RackId": ""})
    finally:
        w.close()
    records = answer["Responses"][0]["Partitions"][0]["Records"]
    assert bytes(records) == EndpointsBroker.records(size)
    _check_rewritten(endpoints_proxy, answer["NodeEndpoints"])
    if size > 65_536:
        assert endpoints_proxy.proxy.streamed_responses > streamed_before


@pytest.mark.parametrize("port", [-1, 70_000])
def test_broker_named_at_a_port_out_of_range_closes_only_that_connection(port, caplog):
    """A broker answer naming a broker at a port no TCP address has (found by fuzzing a broker
    that answers garbage) is a malformed answer: that client connection is closed, logged as such
    rather than as an internal error, for every answer that names brokers
    (Metadata in Python, Produce in the native plane's Rust). Before, the native plane's Python
    side failed converting the port (an OverflowError logged as an internal error) and the asyncio
    plane opened a listener for an address it could never reach."""
    broker = EndpointsBroker(endpoint_port=port)
    proxy = ProxyThread(("127.0.0.1", broker.port))
    try:
        for call in (lambda w: w.call(3, 12, "Metadata", {"Topics": None, "AllowAutoTopicCreation": False,
                                                          "IncludeTopicAuthorizedOperations": False}),
                     lambda w: w.call(0, 10, "Produce", {"TransactionalId": None, "Acks": 1, "TimeoutMs": 1000,
                                                         "TopicData": []})):
            w = Wire(proxy.proxy.bootstrap_address)
            with pytest.raises(ConnectionError):
                call(w)
            w.close()
        assert EndpointsBroker.NODE not in proxy.proxy.broker_ports
    finally:
        proxy.stop()
        broker.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("host", ["bad\x00host", "x" * 64 + ".example", ""], ids=["nul", "long-label", "empty"])
def test_broker_named_at_a_host_no_resolver_takes_closes_only_that_connection(host, caplog):
    """A broker named at a host no resolver accepts (found by fuzzing: a NUL, or a DNS label over
    63 bytes, raised ValueError on the asyncio plane, logged as an internal error) is a broker
    that cannot be reached: a client of that broker's proxy port is closed, with a warning, as
    for a broker that is down; the bootstrap connection and the proxy carry on."""
    broker = EndpointsBroker(endpoint_host=host)
    proxy = ProxyThread(("127.0.0.1", broker.port))
    try:
        w = Wire(proxy.proxy.bootstrap_address)
        answer = w.call(3, 12, "Metadata", {"Topics": None, "AllowAutoTopicCreation": False,
                                            "IncludeTopicAuthorizedOperations": False})
        port = proxy.proxy.broker_ports.get(EndpointsBroker.NODE)
        if port is not None:  # named: its proxy port is the address the client was given
            assert (answer["Brokers"][0]["Host"], answer["Brokers"][0]["Port"]) == ("127.0.0.1", port)
            b = Wire(("127.0.0.1", port))
            with pytest.raises(ConnectionError):
                b.call(3, 12, "Metadata", {"Topics": None, "AllowAutoTopicCreation": False,
                                           "IncludeTopicAuthorizedOperations": False})
            b.close()
        w.call(3, 12, "Metadata", {"Topics": None, "AllowAutoTopicCreation": False,
                                   "IncludeTopicAuthorizedOperations": False})  # still served
        w.close()
    finally:
        proxy.stop()
        broker.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
