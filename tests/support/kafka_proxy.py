"""A ``kquota proxy`` process in front of Apache Kafka's broker (``kafka_broker.KafkaBroker``),
and the client-side helpers the tests against it share: one produce whose outcome (delivered, or
the errors librdkafka reported) is returned instead of raised."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

from waiting import free_port, wait_port, wait_until


class KquotaProxy:
    """``kquota proxy --bootstrap-server BOOTSTRAP --listen PROTOCOL://127.0.0.1:PORT`` with a
    sqlite store in ``directory`` unless ``extra`` names one; ``config``: its --config file."""

    def __init__(self, bootstrap: str, directory: Path, *extra: str, listen: str = "PLAINTEXT",
                 config: Optional[dict[str, str]] = None, brokers: int = 0) -> None:
        # With ``brokers``, the ports after the listen port are free too: the proxy gives broker
        # ``n`` the listen port + 1 + n when it can (kquota-proxy's brokers.rs).
        self.port = free_port(span=brokers + 2 if brokers else 1)
        self.address = f"127.0.0.1:{self.port}"
        argv = [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", bootstrap,
                "--listen", f"{listen}://{self.address}"]
        if "--store" not in extra:
            argv += ["--store", f"sqlite:///{directory}/proxy-{self.port}.db"]
        if config:
            path = directory / f"proxy-{self.port}.properties"
            path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
            argv += ["--config", str(path)]
        self.proc = subprocess.Popen([*argv, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))
        try:
            wait_port(self.port, 30)
        except TimeoutError:
            self.proc.kill()
            raise AssertionError(f"kquota proxy did not listen: {self.proc.communicate()[1].decode()}") from None

    def stop(self) -> tuple[int, str]:
        """SIGTERM; the exit status and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err.decode()


def produce_one(conf: dict, topic: str, timeout: float = 30.0) -> tuple[bool, list]:
    """One message produced with librdkafka settings ``conf``: (delivered, the KafkaErrors of its
    error callback and of the delivery report). Returns as soon as either is known."""
    from confluent_kafka import KafkaError, Producer

    errors: list = []
    delivered: list[bool] = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)
        delivered.append(err is None)

    p = Producer({**conf, "error_cb": errors.append, "message.timeout.ms": int(timeout * 1000),
                  "reconnect.backoff.max.ms": 1000})
    p.produce(topic, b"kquota", on_delivery=on_delivery)
    # final answers; a transport error may be a retry's
    fatal = (KafkaError._AUTHENTICATION, KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._SSL)

    def answered() -> bool:
        p.poll(0.1)
        return bool(delivered) or any(e.code() in fatal for e in errors)

    wait_until(answered, timeout + 5, 0)
    p.purge()
    p.flush(0)
    return bool(delivered and delivered[0]), errors
