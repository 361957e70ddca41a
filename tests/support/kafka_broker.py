"""Apache Kafka's own broker in the tests (``scripts/kafka.sh``; the version is pinned in
``scripts/kafka/pom.xml``).

``scripts/test.sh`` starts one broker for the whole run and exports its state directory as
``KQUOTA_TEST_KAFKA_DIR``; :func:`session_broker` attaches to it. Run outside scripts/test.sh (a
developer running one test file), the fixture starts a broker of its own in a temporary
directory and stops it at the end of the session. Without the jars (``bash scripts/kafka.sh
fetch``) the tests that need the broker skip, and fail under ``CI=true``.

The broker (``kafka.sh`` documents it): KRaft, listeners PLAINTEXT, SASL_PLAINTEXT (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER with Kafka's unsecured validator), SSL (client
certificate required) and SASL_SSL on 127.0.0.1; StandardAuthorizer with the super users in
:attr:`KafkaBroker.super_users`; users ``admin``, ``alice``, ``bob``, ``proxy`` with password
``<name>-secret``; TLS clients named by their certificate's CN; delegation tokens and KIP-368
re-authentication enabled. Tests use their own topics.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO / "scripts" / "kafka.sh"
LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
#: kafka.sh's exit status when the jars have not been fetched.
JARS_MISSING = 3
#: Seconds a JVM tool may take on a loaded 2-core machine.
TOOL_TIMEOUT = 180


@dataclass(frozen=True)
class KafkaCert:
    """One certificate signed by the broker's test CA (subject ``O=kquota,CN=<name>``)."""

    name: str
    pem: Path  # certificate
    key: Path  # unencrypted PKCS#8 key
    keystore_pem: Path  # key, certificate and CA: Kafka's PEM keystore form
    p12: Path  # PKCS12 (key, certificate, CA) with KafkaTls.password


@dataclass(frozen=True)
class KafkaTls:
    """The broker's test certificates: the CA (PEM and a PKCS12 truststore), the broker's own
    (``server``), the admin client's (``client``), the proxy's (``proxy``: its principal at the
    broker is ``User:proxy``), and any user's through :meth:`cert`."""

    dir: Path
    password: str

    @property
    def ca_pem(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def truststore(self) -> Path:
        return self.dir / "truststore.p12"

    def cert(self, name: str) -> KafkaCert:
        """``broker`` or a user's (admin, alice, bob, proxy)."""
        d = self.dir
        if not (d / f"{name}.pem").exists():
            raise KeyError(f"no test certificate named {name!r} in {d}")
        return KafkaCert(name, d / f"{name}.pem", d / f"{name}.key", d / f"{name}.keystore.pem", d / f"{name}.p12")

    @property
    def server(self) -> KafkaCert:
        return self.cert("broker")

    @property
    def client(self) -> KafkaCert:
        return self.cert("admin")

    @property
    def proxy(self) -> KafkaCert:
        return self.cert("proxy")


@dataclass(frozen=True)
class Listener:
    """One listener of a :class:`KafkaBroker` (its first broker's with several), as the proxy
    tests use a broker: ``name`` (PLAINTEXT, SASL_PLAINTEXT, ...), ``host``, ``port``,
    ``address`` (``host:port``) and the broker itself."""

    name: str
    host: str
    port: int
    kafka: "KafkaBroker"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class KafkaBroker:
    """A broker (or cluster) started by ``scripts/kafka.sh``, read from its state directory."""

    def __init__(self, directory: Path, owned: bool = False) -> None:
        self.dir = Path(directory)
        self.owned = owned
        env = _read_env(self.dir / "kafka.env")
        #: listener name -> bootstrap ``127.0.0.1:PORT`` (comma-separated with several brokers)
        self.listeners: dict[str, str] = {name: env[name] for name in LISTENERS}
        #: listener name -> the admin user's Kafka client .properties for it
        self.client_properties: dict[str, Path] = {name: Path(env[f"{name}_PROPERTIES"]) for name in LISTENERS}
        #: user -> password (SCRAM-SHA-256 and -512 credentials, and PLAIN)
        self.users: dict[str, str] = {user: f"{user}-secret" for user in env["USERS"].split()}
        self.super_users: list[str] = env["SUPER_USERS"].split(";")
        self.tls = KafkaTls(Path(env["TLS_DIR"]), env["TLS_PASSWORD"])
        self.brokers = int(env["BROKERS"])
        self.libs = Path(env["LIBS"])
        self.version = env["VERSION"]

    # -------------------------------------------------------------- lifecycle
    @classmethod
    def start(cls, directory: Optional[Path] = None, brokers: int = 1) -> "KafkaBroker":
        """``kafka.sh start`` in ``directory`` (a new temporary one when None). Raises
        :class:`KafkaUnavailable` when the jars are missing, RuntimeError when it does not start."""
        d = Path(directory or tempfile.mkdtemp(prefix="kquota-kafka-"))
        if d.exists() and not any(d.iterdir()):
            d.rmdir()  # kafka.sh removes only directories it made; an empty one it makes again
        from waiting import free_port

        for attempt in (1, 2):  # a port found free may be taken before the broker binds it: once more
            env = dict(os.environ, KQUOTA_KAFKA_DIR=str(d), KQUOTA_KAFKA_PORT=str(free_port()))
            proc = subprocess.run(["bash", str(KAFKA_SH), "start", "--brokers", str(brokers)], env=env,
                                  capture_output=True, text=True, timeout=600)
            if proc.returncode == JARS_MISSING:
                raise KafkaUnavailable(proc.stderr.strip())
            if proc.returncode == 0:
                return cls(d, owned=True)
            if attempt == 2 or "Address already in use" not in proc.stderr:
                raise RuntimeError(f"scripts/kafka.sh start failed:\n{proc.stderr}")
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Stops the broker if this object started it (one started by scripts/test.sh is its)."""
        if self.owned:
            subprocess.run(["bash", str(KAFKA_SH), "stop"], env=dict(os.environ, KQUOTA_KAFKA_DIR=str(self.dir)),
                           capture_output=True, text=True, timeout=120)

    def listener(self, name: str = "PLAINTEXT") -> Listener:
        """The listener ``name`` (of the first broker)."""
        host, _, port = self.listeners[name].split(",")[0].rpartition(":")
        return Listener(name, host, int(port), self)

    # -------------------------------------------------------------- tools
    def tools(self, tool: str, *args: str, input: Optional[str] = None,
              timeout: float = TOOL_TIMEOUT) -> subprocess.CompletedProcess:
        """One of Apache's tools (``kafka-configs``, ``kafka-topics``, ``kafka-acls``,
        ``kafka-console-producer``, ``kafka-console-consumer``, ``kafka-producer-perf-test``,
        ``kafka-consumer-perf-test``, ``kafka-broker-api-versions``) through ``java -cp``; text
        output captured, not checked (each start of a JVM costs seconds: batch the work)."""
        env = dict(os.environ, KQUOTA_KAFKA_LIBS=str(self.libs), KQUOTA_KAFKA_DIR=str(self.dir))
        return subprocess.run(["bash", str(KAFKA_SH), "tool", tool, *args], env=env, input=input,
                              capture_output=True, text=True, timeout=timeout)

    def admin_config(self, listener: str = "PLAINTEXT") -> dict[str, str]:
        """librdkafka (confluent-kafka) settings for the admin user on ``listener``."""
        return self.client_config(listener, "admin")

    def client_config(self, listener: str, user: str = "admin", mechanism: str = "SCRAM-SHA-512",
                      password: Optional[str] = None) -> dict[str, str]:
        """librdkafka settings for ``user`` on ``listener``: SASL ``mechanism`` with the user's
        password (or ``password``), and on SSL the user's own certificate."""
        conf = {"bootstrap.servers": self.listeners[listener], "security.protocol": listener}
        if listener.startswith("SASL_"):
            conf["sasl.mechanism"] = mechanism
            if mechanism == "OAUTHBEARER":
                # librdkafka's unsecured JWT; the broker's unsecured validator checks it
                conf["sasl.oauthbearer.config"] = f"principal={user}"
                conf["enable.sasl.oauthbearer.unsecure.jwt"] = "true"
            else:
                conf["sasl.username"] = user
                conf["sasl.password"] = self.users[user] if password is None else password
        if listener.endswith("SSL"):
            conf["ssl.ca.location"] = str(self.tls.ca_pem)
        if listener == "SSL":
            cert = self.tls.cert(user)
            conf["ssl.certificate.location"] = str(cert.pem)
            conf["ssl.key.location"] = str(cert.key)
        return conf

    def create_topic(self, name: str, partitions: int = 1, config: Optional[dict[str, str]] = None,
                     timeout: float = 60.0, replication_factor: int = 1) -> None:
        """Creates ``name`` as the admin user over PLAINTEXT; an existing topic is an error (tests
        use their own topics)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self.admin_config())
        futures = admin.create_topics([NewTopic(name, partitions, replication_factor, config=dict(config or {}))],
                                      operation_timeout=timeout, request_timeout=timeout)
        futures[name].result(timeout=timeout)

    def allow(self, principal: str, topic_prefix: str, operations: tuple[str, ...] = ("DESCRIBE", "WRITE", "READ"),
              group: Optional[str] = None, timeout: float = 60.0) -> None:
        """ACLs (as the admin user): ``principal`` may do ``operations`` on the topics named
        ``topic_prefix``* (and READ the consumer group ``group``)."""
        from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                           ResourcePatternType, ResourceType)

        bindings = [AclBinding(ResourceType.TOPIC, topic_prefix, ResourcePatternType.PREFIXED, principal, "*",
                               AclOperation[op], AclPermissionType.ALLOW) for op in operations]
        if group is not None:
            bindings.append(AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, principal, "*",
                                       AclOperation.READ, AclPermissionType.ALLOW))
        admin = AdminClient(self.admin_config())
        for future in admin.create_acls(bindings, request_timeout=timeout).values():
            future.result(timeout=timeout)

    def topic_for(self, principal: str, prefix: str) -> str:
        """A new topic, ``prefix`` and a random tail, that ``principal`` may describe, write and
        read (the ACLs are on ``prefix``, so later topics of the prefix are theirs too)."""
        name = f"{prefix}{uuid.uuid4().hex[:8]}"
        self.create_topic(name)
        self.allow(principal, prefix)
        return name

    def __repr__(self) -> str:
        return f"KafkaBroker({self.dir}, {self.listeners})"


class KafkaUnavailable(RuntimeError):
    """Apache Kafka's jars are not fetched (the message names the command that fetches them)."""


def _read_env(path: Path) -> dict[str, str]:
    if not path.exists():
        raise RuntimeError(f"{path} not found: is the broker of scripts/kafka.sh running there?")
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value
    return out


def session_broker(brokers: int = 1):
    """The broker for a test session: scripts/test.sh's (``KQUOTA_TEST_KAFKA_DIR``) for one broker,
    a three-broker cluster already started by ``kafka.sh start --brokers 3`` in
    ``KQUOTA_TEST_KAFKA3_DIR`` (a developer rerunning one test), or a new one. Skips (fails under
    ``CI=true``) when the jars are missing."""
    existing = os.environ.get("KQUOTA_TEST_KAFKA_DIR" if brokers == 1 else "KQUOTA_TEST_KAFKA3_DIR")
    if existing:
        return KafkaBroker(Path(existing))
    try:
        return KafkaBroker.start(brokers=brokers)
    except KafkaUnavailable as e:
        unavailable(str(e))


def unavailable(message: str) -> None:
    """Skips the test for want of the jars; under ``CI=true`` (the test command fetches them) fails."""
    import pytest

    (pytest.fail if os.environ.get("CI", "").lower() == "true" else pytest.skip)(message)
