#!/usr/bin/env bash
# A private, throw-away ZooKeeper server for the store tests (Debian's `zookeeperd` jars).
#   scripts/zookeeper.sh start   -> starts it on 127.0.0.1:$KQUOTA_ZK_PORT (default 21810), waits
#                                   until it answers, prints the address
#   scripts/zookeeper.sh stop    -> stops the server this script started and removes its data
#   scripts/zookeeper.sh status  -> exit 0 if it answers
# State (pid, data dir) lives in $KQUOTA_ZK_DIR (default /tmp/kquota-zk-$PORT). It never touches
# the system service (which, if running, listens on 2181).
set -euo pipefail
PORT="${KQUOTA_ZK_PORT:-21810}"
DIR="${KQUOTA_ZK_DIR:-/tmp/kquota-zk-$PORT}"
JAR="${KQUOTA_ZK_JAR:-/usr/share/java/zookeeper.jar}"

answers() {
  # "ruok" is not whitelisted by default; a TCP connect plus a `srvr` probe is enough to know
  # the server accepts clients. Python is used because `nc` is not always installed.
  python3 - "$PORT" <<'PY'
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
    s.sendall(b"srvr"); data = s.recv(64); s.close()
    sys.exit(0 if data.startswith(b"Zookeeper version") else 1)
except OSError:
    sys.exit(1)
PY
}

start() {
  if [ -f "$DIR/pid" ] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
    echo "zookeeper already running (pid $(cat "$DIR/pid")) on 127.0.0.1:$PORT"; return 0
  fi
  [ -f "$JAR" ] || { echo "zookeeper.sh: $JAR not found (apt-get install zookeeperd)" >&2; exit 1; }
  rm -rf "$DIR"; mkdir -p "$DIR/data"
  cat > "$DIR/zoo.cfg" <<CFG
tickTime=500
dataDir=$DIR/data
clientPort=$PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok
CFG
  cat > "$DIR/log4j.properties" <<CFG
log4j.rootLogger=WARN, F
log4j.appender.F=org.apache.log4j.FileAppender
log4j.appender.F.File=$DIR/zookeeper.log
log4j.appender.F.layout=org.apache.log4j.PatternLayout
log4j.appender.F.layout.ConversionPattern=%d %p %c: %m%n
CFG
  nohup java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Dzookeeper.jmx.log4j.disable=true -Dlog4j.configuration="file:$DIR/log4j.properties" \
    -cp "$JAR:/usr/share/java/slf4j-simple.jar" \
    org.apache.zookeeper.server.ZooKeeperServerMain "$DIR/zoo.cfg" >"$DIR/stdout.log" 2>&1 &
  echo $! > "$DIR/pid"
  for _ in $(seq 1 100); do
    if answers; then echo "zookeeper running (pid $(cat "$DIR/pid")) on 127.0.0.1:$PORT"; return 0; fi
    kill -0 "$(cat "$DIR/pid")" 2>/dev/null || break
    sleep 0.2
  done
  echo "zookeeper.sh: server did not come up on 127.0.0.1:$PORT; log:" >&2
  tail -n 30 "$DIR/stdout.log" >&2 || true
  stop; exit 1
}

stop() {
  if [ -f "$DIR/pid" ]; then
    pid="$(cat "$DIR/pid")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  rm -rf "$DIR"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) answers ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
