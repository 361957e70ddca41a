"""One accuracy client flat out, measured from the client's side: the payload bytes it got
delivered (producers: acknowledged records) or consumed (consumers: records returned to the
application), in 10 ms buckets, and every ``throttle_time_ms`` its responses carried.

The same measurement for a client against Apache Kafka's broker (the quota enforced there) and
through ``kquota proxy`` (the quota enforced by the proxy): the proxy's request log does not exist
in the first case, so ``benches/accuracy_side.py`` compares the two columns by what the client saw.

The client loops are ``tests/support/proxy_accuracy.py``'s, unchanged; this module only hooks the
libraries' own callbacks:

- confluent-kafka: ``on_delivery`` (producer), ``consume()``'s messages (consumer), ``throttle_cb``
  (librdkafka calls it for every non-zero throttle a broker reports, and once when it returns to 0);
- kafka-python: the produce future's callback, ``poll()``'s records, ``BrokerConnection._maybe_throttle``
  (called with every response);
- aiokafka: the delivery future, ``getmany()``'s records, and ``AIOKafkaConnection.send``'s
  response (aiokafka itself ignores ``throttle_time_ms``; the hook only reads it).

Run: ``accuracy_client.py KIND ROLE ADDRESS TOPIC CLIENT_ID SECONDS LOG``: after SECONDS the
log (JSON: ``{"bytes": [[bucket_10ms, n], ...], "throttles": [[ts_ms, ms], ...]}``) is written
and the process ends at once (no library's background thread outlives the measurement).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "support"))


class Meter:
    """Bytes per 10 ms bucket and the throttle times seen, shared by the client's threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.buckets: dict[int, int] = {}
        self.throttles: list[tuple[int, float]] = []

    def add(self, n: int) -> None:
        b = int(time.time() * 100)
        with self.lock:
            self.buckets[b] = self.buckets.get(b, 0) + n

    def throttle(self, ms: float) -> None:
        with self.lock:
            self.throttles.append((int(time.time() * 1000), float(ms)))

    def dump(self, path: str) -> None:
        with self.lock:
            data = {"bytes": sorted(self.buckets.items()), "throttles": list(self.throttles)}
        tmp = path + ".part"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)


def hook_confluent(meter: Meter) -> None:
    import confluent_kafka

    base_p, base_c = confluent_kafka.Producer, confluent_kafka.Consumer

    def on_throttle(event) -> None:
        meter.throttle(event.throttle_time * 1000.0)

    def on_delivery(err, msg) -> None:
        if err is None:
            meter.add(len(msg))

    class Producer(base_p):  # type: ignore[misc, valid-type]
        def __init__(self, conf: dict) -> None:
            super().__init__(dict(conf, on_delivery=on_delivery, throttle_cb=on_throttle))

    class Consumer(base_c):  # type: ignore[misc, valid-type]
        def __init__(self, conf: dict) -> None:
            super().__init__(dict(conf, throttle_cb=on_throttle))

        def consume(self, *args, **kwargs):
            msgs = super().consume(*args, **kwargs)
            meter.add(sum(len(m) for m in msgs if m.error() is None))
            return msgs

    confluent_kafka.Producer, confluent_kafka.Consumer = Producer, Consumer


def hook_kafka_python(meter: Meter) -> None:
    import kafka
    from kafka.conn import BrokerConnection

    maybe_throttle = BrokerConnection._maybe_throttle

    def _maybe_throttle(self, response):
        meter.throttle(getattr(response, "throttle_time_ms", 0) or 0)
        return maybe_throttle(self, response)

    BrokerConnection._maybe_throttle = _maybe_throttle
    send, poll = kafka.KafkaProducer.send, kafka.KafkaConsumer.poll

    def producer_send(self, topic, value=None, *args, **kwargs):
        future = send(self, topic, value, *args, **kwargs)
        n = len(value or b"")
        future.add_callback(lambda _md: meter.add(n))
        return future

    def consumer_poll(self, *args, **kwargs):
        out = poll(self, *args, **kwargs)
        meter.add(sum(len(r.value or b"") for records in out.values() for r in records))
        return out

    kafka.KafkaProducer.send, kafka.KafkaConsumer.poll = producer_send, consumer_poll


def hook_aiokafka(meter: Meter) -> None:
    import aiokafka
    from aiokafka.conn import AIOKafkaConnection

    conn_send = AIOKafkaConnection.send

    def send_hooked(self, request, expect_response=True):
        pending = conn_send(self, request, expect_response)
        if not expect_response:
            return pending

        async def answer():
            response = await pending
            meter.throttle(getattr(response, "throttle_time_ms", 0) or 0)
            return response

        return answer()

    AIOKafkaConnection.send = send_hooked
    produce, getmany = aiokafka.AIOKafkaProducer.send, aiokafka.AIOKafkaConsumer.getmany

    async def producer_send(self, topic, value=None, *args, **kwargs):
        future = await produce(self, topic, value, *args, **kwargs)
        n = len(value or b"")
        future.add_done_callback(lambda f: f.cancelled() or f.exception() is not None or meter.add(n))
        return future

    async def consumer_getmany(self, *args, **kwargs):
        out = await getmany(self, *args, **kwargs)
        meter.add(sum(len(r.value or b"") for records in out.values() for r in records))
        return out

    aiokafka.AIOKafkaProducer.send, aiokafka.AIOKafkaConsumer.getmany = producer_send, consumer_getmany


def main(argv: list[str]) -> None:
    kind, role, address, topic, client_id, seconds, log = argv
    from proxy_accuracy import Cell, client

    meter = Meter()
    hook_confluent(meter)
    hook_kafka_python(meter)
    hook_aiokafka(meter)
    cell = Cell(kind, role, 0.0, client_id)

    def finish() -> None:
        meter.dump(log)
        os._exit(0)

    threading.Timer(float(seconds), finish).start()
    try:
        client(kind, role)(address, cell, topic)
    except BaseException:  # noqa: BLE001 (reported on stderr, the run's row says failed)
        traceback.print_exc()
        meter.dump(log)
        os._exit(1)
    threading.Event().wait()  # the loops return only once stopped, which the timer does not do


if __name__ == "__main__":
    main(sys.argv[1:])
