#!/usr/bin/env bash
# Apache Kafka's own broker (the version pinned in scripts/kafka/pom.xml), throw-away, on loopback,
# for the tests and benchmarks and for a person.
#   scripts/kafka.sh fetch               -> the jars into $KQUOTA_KAFKA_LIBS with Maven (offline when
#                                           ~/.m2 already holds them)
#   scripts/kafka.sh start [--brokers 3] -> formats a KRaft data directory (SCRAM credentials
#                                           included) and starts one combined broker+controller (or
#                                           one controller and three brokers), waits until every
#                                           broker is up, prints `LISTENER=127.0.0.1:PORT[,...]`
#                                           for PLAINTEXT, SASL_PLAINTEXT, SSL and SASL_SSL, then
#                                           `LISTENER_PROPERTIES=<client .properties file>` for each
#   scripts/kafka.sh stop                -> stops the processes this script started (by PID) and
#                                           removes the state directory
#   scripts/kafka.sh status              -> exit 0 if every process it started is alive
#   scripts/kafka.sh tool NAME ARGS...   -> one of Apache's tools (kafka-configs, kafka-topics,
#                                           kafka-acls, kafka-console-producer,
#                                           kafka-console-consumer, kafka-producer-perf-test,
#                                           kafka-consumer-perf-test, kafka-broker-api-versions,
#                                           kafka-reassign-partitions, kafka-leader-election,
#                                           kafka-storage) through `java -cp`
# Errors are one line on stderr; exit status 3 means the jars are not fetched (`fetch`). The
# state directory also holds kafka.env (listeners, properties files, users, super users, the
# certificates' directory and password) for tests/support/kafka_broker.py.
# Environment: KQUOTA_KAFKA_DIR (state directory: pids, configs, data, certificates, logs; default
# /tmp/kquota-kafka), KQUOTA_KAFKA_PORT (first port tried; each listener takes the next free one;
# default 19092), KQUOTA_KAFKA_LIBS (the jars; default ~/.cache/kquota/kafka-<version>/libs),
# KQUOTA_KAFKA_HEAP (default -Xms64m -Xmx512m per broker), KQUOTA_KAFKA_START_TIMEOUT (seconds,
# default 180: a loaded 2-core machine). Everything listens on 127.0.0.1 only. A port taken
# between its choice and Kafka's bind (another start at the same time) starts Kafka again on
# other ports, three attempts in all.
#
# Principals: SASL users admin, alice, bob, proxy (password `<name>-secret`; PLAIN, SCRAM-SHA-256,
# SCRAM-SHA-512; OAUTHBEARER with Kafka's unsecured validator, for tests only); TLS clients are
# named by their certificate's CN (ssl.principal.mapping.rules), so the proxy's certificate
# (CN=proxy) is User:proxy. StandardAuthorizer with super users admin and proxy, and ANONYMOUS:
# the PLAINTEXT listeners (client, inter-broker and controller) authenticate no one, and KRaft's
# controller must authorize the brokers' own requests on them.
# Delegation tokens (KIP-48) are enabled: every node, the controller included (it creates and
# stores them), holds the same delegation.token.secret.key; a user creates a token for itself
# (CreateDelegationToken) and logs in with SCRAM and tokenauth=true. KIP-368 re-authentication
# is enabled (connections.max.reauth.ms: one hour, so a client may re-authenticate whenever it
# wants but no test's connection is ever made to).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
POM="$ROOT/scripts/kafka/pom.xml"
VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")"
LIBS="${KQUOTA_KAFKA_LIBS:-${XDG_CACHE_HOME:-$HOME/.cache}/kquota/kafka-$VERSION/libs}"
DIR="${KQUOTA_KAFKA_DIR:-/tmp/kquota-kafka}"
BASE_PORT="${KQUOTA_KAFKA_PORT:-19092}"
HEAP="${KQUOTA_KAFKA_HEAP:--Xms64m -Xmx512m}"
TIMEOUT="${KQUOTA_KAFKA_START_TIMEOUT:-180}"
FETCH_CMD="bash scripts/kafka.sh fetch"
MARKER=".kquota-kafka"            # only a directory holding it is ever removed
USERS="admin alice bob proxy"     # password: <name>-secret
SUPER_USERS="User:admin;User:proxy;User:ANONYMOUS"
TLS_PASSWORD="kquota-secret"
TOKEN_SECRET="kquota-delegation-token-secret"
REAUTH_MS=3600000
LISTENERS="PLAINTEXT SASL_PLAINTEXT SSL SASL_SSL"
# Small machines, shared with the tests: few GC and compiler threads. A command-line tool lives
# seconds: the serial collector and C1 alone halve its CPU time (start-up dominates).
JVM_OPTS="-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:ParallelGCThreads=1 -XX:ConcGCThreads=1 -XX:CICompilerCount=2 -Djava.awt.headless=true"
TOOL_JVM_OPTS="-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true -Xlog:disable -Xlog:all=warning:stderr"
# The tools' classes, archived (Java's class-data sharing) by the first `start` after a fetch:
# half a tool's start-up again. A missing or stale archive only costs that half back.
TOOLS_JSA="$(dirname "$LIBS")/tools.jsa"

die() { echo "kafka.sh: $*" >&2; exit 1; }

# ------------------------------------------------------------------ fetch
fetch() {
  [ -f "$LIBS/.complete" ] && return 0
  command -v mvn >/dev/null || die "Maven (mvn) is not installed: apt-get install maven, then run: $FETCH_CMD"
  local tmp log
  tmp="$LIBS.partial.$$"; log="$(dirname "$LIBS")/mvn.log"
  mkdir -p "$(dirname "$LIBS")"; rm -rf "$tmp"
  # Offline first: after one online run, ~/.m2 holds every jar and no network is needed.
  if mvn -o -B -q -f "$POM" dependency:copy-dependencies -DoutputDirectory="$tmp" >"$log" 2>&1 \
     || mvn -B -q -f "$POM" dependency:copy-dependencies -DoutputDirectory="$tmp" >>"$log" 2>&1; then
    rm -rf "$LIBS"; mv "$tmp" "$LIBS"; touch "$LIBS/.complete"
  else
    rm -rf "$tmp"
    die "Maven could not fetch Apache Kafka $VERSION (is Maven Central reachable? log: $log); run: $FETCH_CMD"
  fi
}

need_libs() {  # exit status 3 (not 1) lets a caller tell "not fetched" from "did not start"
  [ -f "$LIBS/.complete" ] && return 0
  echo "kafka.sh: Apache Kafka $VERSION's jars are not in $LIBS; fetch them with: $FETCH_CMD" >&2
  exit 3
}

# ------------------------------------------------------------------ tools
tool_class() {
  case "$1" in
    kafka-configs) echo kafka.admin.ConfigCommand ;;
    kafka-storage) echo kafka.tools.StorageTool ;;
    kafka-topics) echo org.apache.kafka.tools.TopicCommand ;;
    kafka-acls) echo org.apache.kafka.tools.AclCommand ;;
    kafka-console-producer) echo org.apache.kafka.tools.ConsoleProducer ;;
    kafka-console-consumer) echo org.apache.kafka.tools.consumer.ConsoleConsumer ;;
    kafka-producer-perf-test) echo org.apache.kafka.tools.ProducerPerformance ;;
    kafka-consumer-perf-test) echo org.apache.kafka.tools.ConsumerPerformance ;;
    kafka-broker-api-versions) echo org.apache.kafka.tools.BrokerApiVersionsCommand ;;
    kafka-reassign-partitions) echo org.apache.kafka.tools.reassign.ReassignPartitionsCommand ;;
    kafka-leader-election) echo org.apache.kafka.tools.LeaderElectionCommand ;;
    *) die "unknown tool '$1' (kafka-configs, kafka-topics, kafka-acls, kafka-console-producer, kafka-console-consumer, kafka-producer-perf-test, kafka-consumer-perf-test, kafka-broker-api-versions, kafka-reassign-partitions, kafka-leader-election, kafka-storage)" ;;
  esac
}

tool() {
  [ $# -ge 1 ] || die "usage: kafka.sh tool NAME ARGS..."
  need_libs
  local class; class="$(tool_class "$1")"; shift
  local share=""
  [ -f "$TOOLS_JSA" ] && share="-XX:SharedArchiveFile=$TOOLS_JSA"
  # shellcheck disable=SC2086
  exec java -Xmx256m $TOOL_JVM_OPTS $share -Dlog4j.configuration="file:$ROOT/scripts/kafka/tools-log4j.properties" -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties" \
    -cp "$LIBS/*" "$class" "$@"
}

# ------------------------------------------------------------------ ports, certificates
free_ports() {  # N: N free loopback ports, the first tried being BASE_PORT, each the next free one
  python3 - "$BASE_PORT" "$1" <<'PY'
import socket, sys
port, want, got = int(sys.argv[1]), int(sys.argv[2]), []
while len(got) < want and port < 65536:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port)); got.append(port)
    except OSError:
        print(f"kafka.sh: port {port} is in use, trying {port + 1}", file=sys.stderr)
    finally:
        s.close()
    port += 1
print(" ".join(map(str, got)))
PY
}

make_tls() {  # a CA and, signed by it, the brokers' and each user's certificate: PEM and PKCS12
  local d="$DIR/tls" name ext
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem \
      -days 30 -subj "/O=kquota tests/CN=kquota Kafka test CA" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
    for name in broker $USERS; do
      ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyAgreement
extendedKeyUsage=serverAuth,clientAuth"
      [ "$name" = broker ] && ext="$ext
subjectAltName=IP:127.0.0.1,DNS:localhost"
      printf '%s\n' "$ext" > "$name.ext"
      openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$name.key" \
        -out "$name.csr" -subj "/O=kquota/CN=$name" 2>/dev/null
      openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -sha256 \
        -extfile "$name.ext" -out "$name.pem" 2>/dev/null
      cat "$name.key" "$name.pem" ca.pem > "$name.keystore.pem"   # Kafka's PEM keystore form
      openssl pkcs12 -export -in "$name.pem" -inkey "$name.key" -certfile ca.pem -name "$name" \
        -out "$name.p12" -passout "pass:$TLS_PASSWORD"
      rm -f "$name.csr" "$name.ext"
    done
    keytool -importcert -noprompt -alias ca -file ca.pem -keystore truststore.p12 -storetype PKCS12 \
      -storepass "$TLS_PASSWORD" >/dev/null 2>&1
  ) || die "could not make the test certificates in $d (openssl and keytool are needed)"
}

# ------------------------------------------------------------------ configuration
jaas_plain_users() { local u; for u in $USERS; do printf ' user_%s="%s-secret"' "$u" "$u"; done; }

sasl_listener_props() {  # LISTENER: the server side of every SASL mechanism on that listener
  local l; l="$(echo "$1" | tr 'A-Z' 'a-z')"
  cat <<EOF
listener.name.$l.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret"$(jaas_plain_users);
listener.name.$l.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.$l.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.$l.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";
listener.name.$l.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler
EOF
}

common_props() {  # NODE_DIR: what every node (controller or broker) shares
  cat <<EOF
controller.quorum.voters=$VOTERS
controller.listener.names=CONTROLLER
log.dirs=$1/data
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=$SUPER_USERS
allow.everyone.if.no.acl.found=false
delegation.token.secret.key=$TOKEN_SECRET
# quick start, small machine
num.network.threads=2
num.io.threads=2
background.threads=2
num.replica.fetchers=1
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=16777216
log.cleaner.backoff.ms=1000
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
default.replication.factor=1
min.insync.replicas=1
EOF
}

broker_props() {  # NODE_ID NODE_DIR ROLES PORTS(PLAINTEXT SASL_PLAINTEXT SSL SASL_SSL [CONTROLLER])
  local id="$1" nd="$2" roles="$3"; shift 3
  local listeners="" advertised="" i=1 l port
  for l in $LISTENERS; do
    port="${!i}"; i=$((i + 1))
    listeners="$listeners${listeners:+,}$l://127.0.0.1:$port"
  done
  advertised="$listeners"
  [ $# -ge 5 ] && listeners="$listeners,CONTROLLER://127.0.0.1:$5"
  cat <<EOF
node.id=$id
process.roles=$roles
listeners=$listeners
advertised.listeners=$advertised
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
connections.max.reauth.ms=$REAUTH_MS
ssl.keystore.type=PKCS12
ssl.keystore.location=$DIR/tls/broker.p12
ssl.keystore.password=$TLS_PASSWORD
ssl.key.password=$TLS_PASSWORD
ssl.truststore.type=PKCS12
ssl.truststore.location=$DIR/tls/truststore.p12
ssl.truststore.password=$TLS_PASSWORD
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^.*CN=([^,]+).*$/\$1/,DEFAULT
$(sasl_listener_props SASL_PLAINTEXT)
$(sasl_listener_props SASL_SSL)
$(common_props "$nd")
EOF
}

controller_props() {  # NODE_ID NODE_DIR PORT
  cat <<EOF
node.id=$1
process.roles=controller
listeners=CONTROLLER://127.0.0.1:$3
listener.security.protocol.map=CONTROLLER:PLAINTEXT
$(common_props "$2")
EOF
}

client_props() {  # LISTENER BOOTSTRAP: the admin user's client configuration for that listener
  echo "bootstrap.servers=$2"
  echo "security.protocol=$1"
  case "$1" in SASL_*)
    echo "sasl.mechanism=SCRAM-SHA-512"
    echo 'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="admin-secret";'
  esac
  case "$1" in *SSL)
    echo "ssl.truststore.type=PKCS12"
    echo "ssl.truststore.location=$DIR/tls/truststore.p12"
    echo "ssl.truststore.password=$TLS_PASSWORD"
  esac
  if [ "$1" = SSL ]; then
    echo "ssl.keystore.type=PKCS12"
    echo "ssl.keystore.location=$DIR/tls/admin.p12"
    echo "ssl.keystore.password=$TLS_PASSWORD"
    echo "ssl.key.password=$TLS_PASSWORD"
  fi
}

# ------------------------------------------------------------------ start / stop
pids() {  # every process started, the controller (when separate) first
  cat "$DIR/controller.pid" "$DIR/pids" 2>/dev/null || true
}

alive() {
  local p any=1
  for p in $(pids); do kill -0 "$p" 2>/dev/null || return 1; any=0; done
  return $any
}

launch() {  # NODE_DIR HEAP: starts kafka.Kafka on NODE_DIR/server.properties, records its pid
  mkdir -p "$1/logs"
  # shellcheck disable=SC2086
  nohup java $2 $JVM_OPTS -Dkafka.logs.dir="$1/logs" \
    -Dlog4j.configuration="file:$ROOT/scripts/kafka/log4j.properties" -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$1/server.properties" >"$1/logs/stdout.log" 2>&1 &
  echo $! >> "$DIR/pids"
}

format() {  # NODE_DIR: kafka-storage format, with the SCRAM credentials
  local scram=() u m
  for u in $USERS; do
    for m in SCRAM-SHA-256 SCRAM-SHA-512; do scram+=(--add-scram "$m=[name=$u,password=$u-secret]"); done
  done
  # shellcheck disable=SC2086
  java -Xmx128m $TOOL_JVM_OPTS -Dlog4j.configuration="file:$ROOT/scripts/kafka/tools-log4j.properties" -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties" \
    -cp "$LIBS/*" kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$1/server.properties" "${scram[@]}" \
    >"$1/format.log" 2>&1 || { cat "$1/format.log" >&2; die "kafka-storage format failed for $1"; }
}

archive_tools() {  # SSL_PORT: one admin-client tool over TLS, its classes archived at exit
  local tmp="$TOOLS_JSA.$$"
  # shellcheck disable=SC2086
  java -Xmx256m $TOOL_JVM_OPTS -XX:ArchiveClassesAtExit="$tmp" \
    -Dlog4j.configuration="file:$ROOT/scripts/kafka/tools-log4j.properties" \
    -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties" -cp "$LIBS/*" kafka.admin.ConfigCommand \
    --bootstrap-server "127.0.0.1:$1" --command-config "$DIR/client-SSL.properties" --describe \
    --entity-type clients --entity-name kquota-archive >/dev/null 2>&1 && mv -f "$tmp" "$TOOLS_JSA" || true
  rm -f "$tmp"
}

started() {  # NODE_DIR: the node logged that it started (a broker: after it was unfenced)
  grep -q "Kafka Server started" "$1/logs/server.log" 2>/dev/null
}

answers() {  # HOST:PORT: a TCP connection is accepted
  python3 - "$1" <<'PY'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
try:
    socket.create_connection((host, int(port)), timeout=1).close()
except OSError:
    sys.exit(1)
PY
}

start() {
  local brokers=1
  while [ $# -gt 0 ]; do
    case "$1" in
      --brokers) [ $# -ge 2 ] || die "--brokers needs a number (1 or 3)"; brokers="$2"; shift 2 ;;
      *) die "unknown option '$1' (usage: kafka.sh start [--brokers 1|3])" ;;
    esac
  done
  case "$brokers" in 1|3) ;; *) die "--brokers must be 1 or 3, not '$brokers'" ;; esac
  if alive; then cat "$DIR/listeners"; return 0; fi
  if [ -e "$DIR" ]; then
    [ -f "$DIR/$MARKER" ] || die "$DIR exists and was not made by kafka.sh; set KQUOTA_KAFKA_DIR to another directory"
    stop
  fi
  need_libs
  command -v java >/dev/null || die "java is not installed (Java 17+: apt-get install default-jre-headless)"
  mkdir -p "$DIR"; touch "$DIR/$MARKER"; : > "$DIR/pids"
  CLUSTER_ID="$(python3 "$ROOT/scripts/kafka/cluster_id.py")"
  make_tls & local tls_pid=$!   # openssl and keytool while kafka-storage formats

  local ports nodes=() n i l p bootstrap
  # shellcheck disable=SC2207
  ports=($(free_ports $((brokers * 4 + 1))))
  [ ${#ports[@]} -eq $((brokers * 4 + 1)) ] || die "not enough free ports from $BASE_PORT"
  local cport="${ports[$((brokers * 4))]}"
  if [ "$brokers" = 1 ]; then
    VOTERS="1@127.0.0.1:$cport"
    mkdir -p "$DIR/node-1"
    broker_props 1 "$DIR/node-1" broker,controller "${ports[@]:0:4}" "$cport" > "$DIR/node-1/server.properties"
    nodes=("$DIR/node-1")
  else
    VOTERS="100@127.0.0.1:$cport"
    mkdir -p "$DIR/controller"
    controller_props 100 "$DIR/controller" "$cport" > "$DIR/controller/server.properties"
    for n in $(seq 1 "$brokers"); do
      mkdir -p "$DIR/node-$n"
      broker_props "$n" "$DIR/node-$n" broker "${ports[@]:$(((n - 1) * 4)):4}" > "$DIR/node-$n/server.properties"
      nodes+=("$DIR/node-$n")
    done
  fi

  # Format every node in parallel (one JVM each), then start them (the controller first).
  local all=("${nodes[@]}") fpids=()
  [ "$brokers" = 3 ] && all=("$DIR/controller" "${nodes[@]}")
  for n in "${all[@]}"; do format "$n" & fpids+=($!); done
  for p in "${fpids[@]}" "$tls_pid"; do wait "$p" || { stop; exit 1; }; done
  if [ "$brokers" = 3 ]; then
    launch "$DIR/controller" "-Xms32m -Xmx256m"
    mv "$DIR/pids" "$DIR/controller.pid"; : > "$DIR/pids"
  fi
  for n in "${nodes[@]}"; do launch "$n" "$HEAP"; done

  local deadline=$((SECONDS + TIMEOUT)) up
  while :; do
    up=0
    for n in "${nodes[@]}"; do started "$n" && up=$((up + 1)); done
    [ "$up" = "${#nodes[@]}" ] && break
    if ! alive || [ $SECONDS -ge $deadline ]; then
      local attempt="${KQUOTA_KAFKA_START_ATTEMPT:-1}"
      if ! alive && [ "$attempt" -lt 3 ] && grep -qs "Address already in use" "${all[@]/%//logs/server.log}"; then
        # A port found free was taken before Kafka bound it (another start at the same time):
        # start again on freshly chosen ports, at most three times in all.
        echo "kafka.sh: a port was taken while Apache Kafka started; starting again (attempt $((attempt + 1)) of 3)" >&2
        stop
        KQUOTA_KAFKA_START_ATTEMPT=$((attempt + 1)) exec bash "$ROOT/scripts/kafka.sh" start --brokers "$brokers"
      fi
      local why="did not come up within ${TIMEOUT}s"; alive || why="exited"
      echo "kafka.sh: Apache Kafka $VERSION $why; last lines of its logs:" >&2
      for n in "${all[@]}"; do
        echo "--- $n" >&2
        tail -n 25 "$n/logs/server.log" "$n/logs/stdout.log" >&2 2>/dev/null || true
      done
      stop; exit 1
    fi
    sleep 0.3
  done

  # Every listener accepts connections, then the summary (also kept in $DIR for the tests).
  {
    i=0
    for l in $LISTENERS; do
      bootstrap=""
      for n in $(seq 0 $((brokers - 1))); do
        p="127.0.0.1:${ports[$((n * 4 + i))]}"
        answers "$p" || { stop; die "$l listener $p does not accept connections"; }
        bootstrap="$bootstrap${bootstrap:+,}$p"
      done
      echo "$l=$bootstrap"
      client_props "$l" "$bootstrap" > "$DIR/client-$l.properties"
      i=$((i + 1))
    done
    for l in $LISTENERS; do echo "${l}_PROPERTIES=$DIR/client-$l.properties"; done
  } > "$DIR/listeners"
  [ -f "$TOOLS_JSA" ] || archive_tools "${ports[2]}"
  {
    cat "$DIR/listeners"
    echo "BROKERS=$brokers"
    echo "USERS=$USERS"
    echo "SUPER_USERS=$SUPER_USERS"
    echo "TLS_DIR=$DIR/tls"
    echo "TLS_PASSWORD=$TLS_PASSWORD"
    echo "LIBS=$LIBS"
    echo "VERSION=$VERSION"
  } > "$DIR/kafka.env"
  cat "$DIR/listeners"
}

end() {  # PIDS...: SIGTERM, then SIGKILL those still there after 15 s
  local p
  for p in "$@"; do kill "$p" 2>/dev/null || true; done
  for p in "$@"; do
    for _ in $(seq 1 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
}

stop() {
  # Brokers before the controller: a broker's controlled shutdown needs its controller.
  # shellcheck disable=SC2046
  end $(cat "$DIR/pids" 2>/dev/null || true)
  # shellcheck disable=SC2046
  end $(cat "$DIR/controller.pid" 2>/dev/null || true)
  if [ -e "$DIR" ]; then
    [ -f "$DIR/$MARKER" ] || die "$DIR was not made by kafka.sh; not removing it"
    rm -rf "$DIR"
  fi
}

case "${1:-}" in
  fetch) fetch ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  status) alive ;;
  tool) shift; tool "$@" ;;
  *) echo "usage: $0 fetch | start [--brokers 1|3] | stop | status | tool NAME ARGS..." >&2; exit 2 ;;
esac
