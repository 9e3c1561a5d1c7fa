#!/usr/bin/env bash
# Local stack without Docker: real Apache Kafka (KRaft) and real PostgreSQL as
# local processes, all state under the project's own .dev/ folder.
#
#   stack/stack.sh up      install what is missing, start, wait until ready (idempotent)
#   stack/stack.sh down    stop both, leave no process behind (idempotent)
#   stack/stack.sh status  say what runs where
#   stack/stack.sh env     print the connection settings as KEY=value lines
#
# Settings (environment): DEV_DIR, KAFKA_PORT, KAFKA_CONTROLLER_PORT, PG_PORT,
# KAFKA_VERSION (must match stack/kafka/pom.xml unless overridden), READY_TIMEOUT.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEV_DIR="${DEV_DIR:-$ROOT/.dev}"
KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
PG_PORT="${PG_PORT:-55432}"
PG_USER="${PG_USER:-reminders}"
PG_DB="${PG_DB:-reminders}"
READY_TIMEOUT="${READY_TIMEOUT:-90}"
KAFKA_HEAP="${KAFKA_HEAP:--Xms256m -Xmx768m}"

KAFKA_DIR="$DEV_DIR/kafka"
PG_DIR="$DEV_DIR/postgres"
PG_DATA="$PG_DIR/data"

log() { printf '[stack] %s\n' "$*" >&2; }
die() { printf '[stack] ERROR: %s\n' "$*" >&2; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ---------------------------------------------------------------- PostgreSQL
pg_bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/postgres" ] && { echo "$d"; return 0; }
  done
  return 1
}

pg_install() {
  pg_bindir >/dev/null && return 0
  [ "$(id -u)" = 0 ] || die "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/postgres); install Debian's 'postgresql' package"
  log "installing PostgreSQL from Debian's packages"
  # No system cluster: this stack runs its own data directory on its own port.
  mkdir -p /etc/postgresql-common
  [ -f /etc/postgresql-common/createcluster.conf ] || echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.conf
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  pg_bindir >/dev/null || die "apt-get install postgresql did not provide /usr/lib/postgresql/*/bin/postgres"
}

# PostgreSQL refuses to run as root; as root we run it as the 'postgres' system user.
pg_as() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_prepare_dirs() {
  mkdir -p "$PG_DIR"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || die "user 'postgres' missing (it comes with Debian's postgresql package)"
    chown postgres:postgres "$PG_DIR"
    # The server user must be able to reach its data directory: grant traverse
    # (x, not read) on the ancestors that lack it, e.g. a mktemp -d clone folder.
    local d="$PG_DIR"
    while [ "$d" != "/" ]; do
      d="$(dirname "$d")"
      runuser -u postgres -- test -x "$d" || chmod o+x "$d"
    done
  fi
}

pg_running() { [ -f "$PG_DATA/postmaster.pid" ] && pg_as "$(pg_bindir)/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; }

pg_up() {
  pg_install
  local bin; bin="$(pg_bindir)"
  pg_prepare_dirs
  if [ ! -f "$PG_DATA/PG_VERSION" ]; then
    log "initdb $PG_DATA"
    pg_as "$bin/initdb" -D "$PG_DATA" -U "$PG_USER" --auth=trust -E UTF8 --locale=C.UTF-8 >"$PG_DIR/initdb.log" 2>&1 \
      || die "initdb failed, see $PG_DIR/initdb.log"
  fi
  if pg_running; then
    log "PostgreSQL already running on 127.0.0.1:$PG_PORT"
  else
    if port_open "$PG_PORT"; then die "port $PG_PORT is taken by another process; set PG_PORT"; fi
    log "starting PostgreSQL on 127.0.0.1:$PG_PORT"
    # Tuned for a throwaway dev/test cluster: no fsync, enough connections for several workers.
    pg_as "$bin/pg_ctl" -D "$PG_DATA" -l "$PG_DIR/postgres.log" -w -t "$READY_TIMEOUT" \
      -o "-p $PG_PORT -h 127.0.0.1 -k '' -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=256MB -c max_locks_per_transaction=256" \
      start >/dev/null || die "PostgreSQL did not start, see $PG_DIR/postgres.log"
  fi
  local i
  for ((i = 0; i < READY_TIMEOUT; i++)); do
    "$bin/pg_isready" -h 127.0.0.1 -p "$PG_PORT" -q && break
    sleep 1
  done
  "$bin/pg_isready" -h 127.0.0.1 -p "$PG_PORT" -q || die "PostgreSQL not ready after ${READY_TIMEOUT}s, see $PG_DIR/postgres.log"
  if ! "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d postgres -tAc "select 1 from pg_database where datname='$PG_DB'" | grep -q 1; then
    "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" "$PG_DB"
  fi
}

pg_down() {
  local bin
  bin="$(pg_bindir)" || return 0
  if [ -f "$PG_DATA/postmaster.pid" ]; then
    log "stopping PostgreSQL"
    pg_as "$bin/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >/dev/null 2>&1 || true
  fi
}

# ---------------------------------------------------------------- Kafka
KAFKA_VERSION="${KAFKA_VERSION:-$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$ROOT/stack/kafka/pom.xml")}"
KAFKA_LIBS="$KAFKA_DIR/libs-$KAFKA_VERSION"

# Java 17 and Maven the way PostgreSQL is installed: from Debian's packages when root,
# a message naming the packages otherwise.
java_install() {
  local need=()
  command -v java >/dev/null || need+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || need+=(maven)
  [ ${#need[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "${need[*]} missing: Kafka needs Java 17 and Maven resolves its jars (Debian: sudo apt-get install ${need[*]})"
  log "installing ${need[*]} from Debian's packages"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  command -v java >/dev/null && command -v mvn >/dev/null || die "apt-get install ${need[*]} did not provide java and mvn"
}

kafka_install() {
  [ -f "$KAFKA_LIBS/.complete" ] && return 0
  java_install
  log "resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION from Maven Central"
  mkdir -p "$KAFKA_LIBS"
  mvn -q -B -f "$ROOT/stack/kafka/pom.xml" -Dkafka.version="$KAFKA_VERSION" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$KAFKA_LIBS" >"$KAFKA_DIR/mvn.log" 2>&1 \
    || { cat "$KAFKA_DIR/mvn.log" >&2; die "mvn could not resolve the Kafka jars (output above)"; }
  touch "$KAFKA_LIBS/.complete"
}

kafka_pid() { [ -f "$KAFKA_DIR/kafka.pid" ] && kill -0 "$(cat "$KAFKA_DIR/kafka.pid")" 2>/dev/null && cat "$KAFKA_DIR/kafka.pid"; }

kafka_jvm_args() {
  # shellcheck disable=SC2086 # KAFKA_HEAP holds several options on purpose
  printf '%s\n' $KAFKA_HEAP -XX:+UseG1GC -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$ROOT/stack/kafka/log4j2.properties" "-Dkafka.logs.file=$KAFKA_DIR/server.log" \
    -cp "$KAFKA_LIBS/*"
}

kafka_java() {
  local args; mapfile -t args < <(kafka_jvm_args)
  java "${args[@]}" "$@"
}

kafka_up() {
  kafka_install
  mkdir -p "$KAFKA_DIR"
  if kafka_pid >/dev/null; then
    log "Kafka already running on 127.0.0.1:$KAFKA_PORT"
  else
    if port_open "$KAFKA_PORT"; then die "port $KAFKA_PORT is taken by another process; set KAFKA_PORT"; fi
    cat >"$KAFKA_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.partitions=4
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=24
EOF
    if [ ! -f "$KAFKA_DIR/data/meta.properties" ]; then
      log "formatting KRaft storage"
      local cluster_id
      cluster_id="$(kafka_java kafka.tools.StorageTool random-uuid 2>>"$KAFKA_DIR/format.log")"
      kafka_java kafka.tools.StorageTool format -t "$cluster_id" -c "$KAFKA_DIR/server.properties" >>"$KAFKA_DIR/format.log" 2>&1 \
        || die "Kafka storage format failed, see $KAFKA_DIR/format.log"
    fi
    log "starting Kafka $KAFKA_VERSION (KRaft) on 127.0.0.1:$KAFKA_PORT"
    : >"$KAFKA_DIR/server.log"
    # setsid: the broker must not share the caller's process group (a test runner's
    # Ctrl-C should not take the stack down half-way). Started directly (not through a
    # shell function) so that $! is the JVM itself and `down` can signal it.
    # Each partition holds a few open files; a broker that many test runs filled with
    # topics dies with "Too many open files" at the default limit.
    ulimit -Hn 1048576 2>/dev/null || true
    ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
    local args; mapfile -t args < <(kafka_jvm_args)
    setsid java "${args[@]}" kafka.Kafka "$KAFKA_DIR/server.properties" >"$KAFKA_DIR/stdout.log" 2>&1 </dev/null &
    echo $! >"$KAFKA_DIR/kafka.pid"
  fi
  local i
  for ((i = 0; i < READY_TIMEOUT * 2; i++)); do
    if grep -q 'Kafka Server started\|KafkaRaftServer.*started' "$KAFKA_DIR/server.log" 2>/dev/null && port_open "$KAFKA_PORT"; then
      return 0
    fi
    kafka_pid >/dev/null || { tail -n 30 "$KAFKA_DIR/stdout.log" "$KAFKA_DIR/server.log" >&2; die "Kafka exited during startup, see $KAFKA_DIR/server.log"; }
    sleep 0.5
  done
  die "Kafka not ready after ${READY_TIMEOUT}s, see $KAFKA_DIR/server.log"
}

kafka_down() {
  local pid i
  pid="$(kafka_pid)" || { rm -f "$KAFKA_DIR/kafka.pid"; return 0; }
  log "stopping Kafka (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 60; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && { log "Kafka did not stop in 30s, killing"; kill -KILL "$pid" 2>/dev/null || true; }
  rm -f "$KAFKA_DIR/kafka.pid"
}

print_env() {
  cat <<EOF
KAFKA_BOOTSTRAP=127.0.0.1:$KAFKA_PORT
DATABASE_URL=postgresql://$PG_USER@127.0.0.1:$PG_PORT/$PG_DB
EOF
}

case "${1:-}" in
  up) pg_up; kafka_up; log "ready: Kafka 127.0.0.1:$KAFKA_PORT, PostgreSQL 127.0.0.1:$PG_PORT (logs in $DEV_DIR)";;
  down) kafka_down; pg_down; log "stopped";;
  status)
    if pid="$(kafka_pid)"; then echo "kafka: running pid $pid on 127.0.0.1:$KAFKA_PORT"; else echo "kafka: stopped"; fi
    if pg_bindir >/dev/null && pg_running; then echo "postgres: running on 127.0.0.1:$PG_PORT"; else echo "postgres: stopped"; fi;;
  env) print_env;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2;;
esac
