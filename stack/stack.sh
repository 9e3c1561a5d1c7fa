#!/usr/bin/env bash
# Local stack without Docker: real Apache Kafka (KRaft) and real PostgreSQL as
# local processes, all state under the project's own .dev/ folder.
#
#   stack/stack.sh up      install what is missing, start, wait until ready (idempotent)
#   stack/stack.sh down    stop both, leave no process behind (idempotent)
#   stack/stack.sh status  say what runs where
#   stack/stack.sh env     print the connection settings as KEY=value lines
#
#   stack/stack.sh node-kill N / node-down N / node-up N   one Kafka node (fault tests)
#   stack/stack.sh pg-up / pg-down   PostgreSQL alone (a private database, the shared Kafka)
#
# Settings (environment): DEV_DIR, KAFKA_PORT, KAFKA_CONTROLLER_PORT, PG_PORT,
# KAFKA_VERSION (must match stack/kafka/pom.xml unless overridden), READY_TIMEOUT, and the
# stack's shape: STACK_KAFKA_BROKERS (1 or 3), STACK_KAFKA_SECURITY (plaintext or sasl_ssl:
# a CA and certificates made with openssl, SCRAM users), STACK_PG_DURABLE (0 or 1),
# STACK_KAFKA_AUTO_CREATE (true or false: the brokers' auto.create.topics.enable),
# STACK_KAFKA_ACLS (true or false, sasl_ssl only: KRaft's StandardAuthorizer on, the admin
# user a super user, every other principal refused what no ACL allows).
# `env` prints the client settings of the shape (KAFKA_SECURITY_PROTOCOL, ...).
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
  if ! pg_running; then
    if port_open "$PG_PORT"; then die "port $PG_PORT is taken by another process; set PG_PORT"; fi
    pg_start "$bin"
  elif [ -n "${STACK_PG_DURABLE_SET:-}" ] && [ "$(pg_mode)" != "$(pg_wanted_mode)" ]; then
    # Only an explicit STACK_PG_DURABLE changes a running server's mode.
    log "PostgreSQL runs $(pg_mode), STACK_PG_DURABLE=$STACK_PG_DURABLE wants $(pg_wanted_mode): restarting it"
    pg_as "$bin/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >/dev/null
    pg_start "$bin"
  else
    log "PostgreSQL already running on 127.0.0.1:$PG_PORT ($(pg_mode))"
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

# STACK_PG_DURABLE=1: fsync, synchronous_commit and full_page_writes on, as a production
# database runs (a crash keeps every committed transaction). The default is a fast throwaway
# cluster for development, where a crash may lose transactions it had already committed.
STACK_PG_DURABLE_SET="${STACK_PG_DURABLE:+1}"
STACK_PG_DURABLE="${STACK_PG_DURABLE:-0}"
case "$STACK_PG_DURABLE" in 0|1) ;; *) die "STACK_PG_DURABLE must be 0 or 1, got '$STACK_PG_DURABLE'";; esac
pg_wanted_mode() { if [ "$STACK_PG_DURABLE" = 1 ]; then echo durable; else echo fast; fi; }
pg_mode() { # what the running server does: durable (fsync and synchronous_commit on) or fast
  local v
  v="$("$(pg_bindir)/psql" -h 127.0.0.1 -p "$PG_PORT" -U "$PG_USER" -d postgres -tAc "select current_setting('fsync') || current_setting('synchronous_commit')" 2>/dev/null)" || { echo unknown; return 0; }
  if [ "$v" = onon ]; then echo durable; else echo fast; fi
}

pg_start() {
  local bin="$1" safety="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  [ "$STACK_PG_DURABLE" = 1 ] && safety="-c fsync=on -c synchronous_commit=on -c full_page_writes=on"
  log "starting PostgreSQL on 127.0.0.1:$PG_PORT ($(pg_wanted_mode))"
  # Enough connections for several workers; pg_stat_statements for the benches' statement
  # time per event (bench/cpu.py); the rest is PostgreSQL's defaults.
  pg_as "$bin/pg_ctl" -D "$PG_DATA" -l "$PG_DIR/postgres.log" -w -t "$READY_TIMEOUT" \
    -o "-p $PG_PORT -h 127.0.0.1 -k '' -c max_connections=300 $safety -c shared_buffers=256MB -c max_locks_per_transaction=256 -c shared_preload_libraries=pg_stat_statements" \
    start >/dev/null || die "PostgreSQL did not start, see $PG_DIR/postgres.log"
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

# Brokers: STACK_KAFKA_BROKERS (1 or 3) KRaft nodes, each broker and controller in one JVM.
# Node 1 keeps the single-broker layout ($KAFKA_DIR/kafka.pid, data/, server.log); nodes 2..N
# live under $KAFKA_DIR/node-N/. Ports: KAFKA_PORTS / KAFKA_CONTROLLER_PORTS (comma lists), by
# default KAFKA_PORT and KAFKA_CONTROLLER_PORT for node 1, then +2 per node.
STACK_KAFKA_BROKERS="${STACK_KAFKA_BROKERS:-1}"
STACK_KAFKA_SECURITY="${STACK_KAFKA_SECURITY:-plaintext}"
STACK_KAFKA_AUTO_CREATE="${STACK_KAFKA_AUTO_CREATE:-true}"
case "$STACK_KAFKA_AUTO_CREATE" in true|false) ;; *) die "STACK_KAFKA_AUTO_CREATE must be true or false, got '$STACK_KAFKA_AUTO_CREATE'";; esac
case "$STACK_KAFKA_BROKERS" in 1|3) ;; *) die "STACK_KAFKA_BROKERS must be 1 or 3, got '$STACK_KAFKA_BROKERS'";; esac
case "$STACK_KAFKA_SECURITY" in plaintext|sasl_ssl) ;; *) die "STACK_KAFKA_SECURITY must be plaintext or sasl_ssl, got '$STACK_KAFKA_SECURITY'";; esac
STACK_KAFKA_ACLS="${STACK_KAFKA_ACLS:-false}"
case "$STACK_KAFKA_ACLS" in true|false) ;; *) die "STACK_KAFKA_ACLS must be true or false, got '$STACK_KAFKA_ACLS'";; esac
[ "$STACK_KAFKA_ACLS" = false ] || [ "$STACK_KAFKA_SECURITY" = sasl_ssl ] || die "STACK_KAFKA_ACLS=true needs STACK_KAFKA_SECURITY=sasl_ssl (a principal to authorize)"
# SCRAM users of the secured stack: the brokers' own, and the service's.
KAFKA_ADMIN_USER=admin
KAFKA_ADMIN_PASSWORD="${KAFKA_ADMIN_PASSWORD:-admin-secret}"
KAFKA_APP_USER="${KAFKA_APP_USER:-reminders}"
KAFKA_APP_PASSWORD="${KAFKA_APP_PASSWORD:-reminders-secret}"
TLS_DIR="$KAFKA_DIR/tls"

node_port() { # node_port LIST DEFAULT_BASE N
  local list="$1" base="$2" n="$3"
  if [ -n "$list" ]; then echo "$list" | cut -d, -f"$n"; else echo $((base + 2 * (n - 1))); fi
}
broker_port() { node_port "${KAFKA_PORTS:-}" "$KAFKA_PORT" "$1"; }
controller_port() { node_port "${KAFKA_CONTROLLER_PORTS:-}" "$KAFKA_CONTROLLER_PORT" "$1"; }
node_dir() { if [ "$1" = 1 ]; then echo "$KAFKA_DIR"; else echo "$KAFKA_DIR/node-$1"; fi; }
bootstrap_list() {
  local n out=""
  for ((n = 1; n <= STACK_KAFKA_BROKERS; n++)); do out="$out${out:+,}127.0.0.1:$(broker_port "$n")"; done
  echo "$out"
}

node_pid() { local d; d="$(node_dir "$1")"; [ -f "$d/kafka.pid" ] && kill -0 "$(cat "$d/kafka.pid")" 2>/dev/null && cat "$d/kafka.pid"; }
kafka_pid() { node_pid 1; }

kafka_jvm_args() { # kafka_jvm_args LOG_FILE
  # shellcheck disable=SC2086 # KAFKA_HEAP holds several options on purpose
  printf '%s\n' $KAFKA_HEAP -XX:+UseG1GC -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$ROOT/stack/kafka/log4j2.properties" "-Dkafka.logs.file=${1:-$KAFKA_DIR/server.log}" \
    -cp "$KAFKA_LIBS/*"
}

kafka_java() {
  local args; mapfile -t args < <(kafka_jvm_args "$KAFKA_DIR/tools.log")
  java "${args[@]}" "$@"
}

# A CA and one certificate for every node (127.0.0.1 and localhost), PEM, made once.
tls_make() {
  [ -f "$TLS_DIR/.complete" ] && return 0
  command -v openssl >/dev/null || die "openssl is needed for STACK_KAFKA_SECURITY=sasl_ssl (Debian: apt-get install openssl)"
  log "making a CA and the brokers' certificate under $TLS_DIR"
  mkdir -p "$TLS_DIR"
  (
    cd "$TLS_DIR"
    # The extensions a strict verifier (Python 3.13's default VERIFY_X509_STRICT) requires:
    # a critical CA basic constraint and key usage on the CA, key identifiers, and the
    # server's key usages on the broker's certificate.
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=reminders local stack CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -keyout ca.key -out ca.pem
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout broker.key -out broker.csr
    printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' 'basicConstraints=critical,CA:FALSE' \
      'keyUsage=critical,digitalSignature,keyEncipherment' 'extendedKeyUsage=serverAuth' \
      'subjectKeyIdentifier=hash' 'authorityKeyIdentifier=keyid,issuer' >broker.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
      -extfile broker.ext -out broker.crt
    # Kafka's PEM key store: the private key (PKCS#8) followed by the certificate chain.
    openssl pkcs8 -topk8 -nocrypt -in broker.key -out broker.p8
    cat broker.p8 broker.crt ca.pem >broker-keystore.pem
  ) >"$KAFKA_DIR/tls.log" 2>&1 || { cat "$KAFKA_DIR/tls.log" >&2; die "openssl failed (output above)"; }
  touch "$TLS_DIR/.complete"
}

node_properties() { # node_properties N
  local n="$1" d voters="" i rf=1 isr=1 proto=PLAINTEXT
  d="$(node_dir "$n")"
  for ((i = 1; i <= STACK_KAFKA_BROKERS; i++)); do voters="$voters${voters:+,}$i@127.0.0.1:$(controller_port "$i")"; done
  if [ "$STACK_KAFKA_BROKERS" -ge 3 ]; then rf=3; isr=2; fi
  [ "$STACK_KAFKA_SECURITY" = sasl_ssl ] && proto=SASL_SSL
  cat <<EOF
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=$proto://127.0.0.1:$(broker_port "$n"),CONTROLLER://127.0.0.1:$(controller_port "$n")
advertised.listeners=$proto://127.0.0.1:$(broker_port "$n")
controller.listener.names=CONTROLLER
inter.broker.listener.name=$proto
listener.security.protocol.map=$proto:$proto,CONTROLLER:PLAINTEXT
log.dirs=$d/data
num.partitions=4
auto.create.topics.enable=$STACK_KAFKA_AUTO_CREATE
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
# DLQ topics override this with retention.ms (KAFKA_DLQ_RETENTION_HOURS, set by the streams topics command).
log.retention.hours=24
EOF
  if [ "$proto" = SASL_SSL ]; then
    cat <<EOF
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$KAFKA_ADMIN_USER" password="$KAFKA_ADMIN_PASSWORD";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
ssl.endpoint.identification.algorithm=https
ssl.client.auth=none
EOF
  fi
  if [ "$STACK_KAFKA_ACLS" = true ]; then
    # The brokers authenticate as the admin; the controller listener (PLAINTEXT, loopback
    # only) is ANONYMOUS. Nobody else gets anything no ACL allows.
    cat <<EOF
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:$KAFKA_ADMIN_USER;User:ANONYMOUS
allow.everyone.if.no.acl.found=false
EOF
  fi
}

node_up() { # node_up N CLUSTER_ID
  local n="$1" cluster_id="$2" d port
  d="$(node_dir "$n")"; port="$(broker_port "$n")"
  mkdir -p "$d"
  if node_pid "$n" >/dev/null; then
    log "Kafka node $n already running on 127.0.0.1:$port"
    return 0
  fi
  if port_open "$port"; then die "port $port is taken by another process; set KAFKA_PORT (or KAFKA_PORTS)"; fi
  node_properties "$n" >"$d/server.properties"
  if [ ! -f "$d/data/meta.properties" ]; then
    log "formatting KRaft storage of node $n"
    local scram=()
    if [ "$STACK_KAFKA_SECURITY" = sasl_ssl ]; then
      scram=(--add-scram "SCRAM-SHA-512=[name=$KAFKA_ADMIN_USER,password=$KAFKA_ADMIN_PASSWORD]"
        --add-scram "SCRAM-SHA-512=[name=$KAFKA_APP_USER,password=$KAFKA_APP_PASSWORD]"
        --add-scram "SCRAM-SHA-256=[name=$KAFKA_APP_USER,password=$KAFKA_APP_PASSWORD]")
    fi
    kafka_java kafka.tools.StorageTool format -t "$cluster_id" -c "$d/server.properties" "${scram[@]}" >>"$d/format.log" 2>&1 \
      || die "Kafka storage format failed, see $d/format.log"
  fi
  log "starting Kafka $KAFKA_VERSION (KRaft node $n, $STACK_KAFKA_SECURITY) on 127.0.0.1:$port"
  : >"$d/server.log"
  # setsid: the broker must not share the caller's process group (a test runner's
  # Ctrl-C should not take the stack down half-way). Started directly (not through a
  # shell function) so that $! is the JVM itself and `down` can signal it.
  # Each partition holds a few open files; a broker that many test runs filled with
  # topics dies with "Too many open files" at the default limit.
  ulimit -Hn 1048576 2>/dev/null || true
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  local args; mapfile -t args < <(kafka_jvm_args "$d/server.log")
  setsid java "${args[@]}" kafka.Kafka "$d/server.properties" >"$d/stdout.log" 2>&1 </dev/null &
  echo $! >"$d/kafka.pid"
}

node_ready() { # node_ready N: waits until node N serves its port
  local n="$1" d i port
  d="$(node_dir "$n")"; port="$(broker_port "$n")"
  for ((i = 0; i < READY_TIMEOUT * 2; i++)); do
    if grep -q 'Kafka Server started\|KafkaRaftServer.*started' "$d/server.log" 2>/dev/null && port_open "$port"; then
      return 0
    fi
    node_pid "$n" >/dev/null || { tail -n 30 "$d/stdout.log" "$d/server.log" >&2; die "Kafka node $n exited during startup, see $d/server.log"; }
    sleep 0.5
  done
  die "Kafka node $n not ready after ${READY_TIMEOUT}s, see $d/server.log"
}

kafka_up() {
  kafka_install
  mkdir -p "$KAFKA_DIR"
  # The stack's shape is fixed when its storage is formatted: a data dir made for another
  # shape would not form a quorum, so say so instead of failing obscurely.
  local shape="brokers=$STACK_KAFKA_BROKERS security=$STACK_KAFKA_SECURITY"
  if [ -f "$KAFKA_DIR/data/meta.properties" ] && [ "$(cat "$KAFKA_DIR/shape" 2>/dev/null || echo "brokers=1 security=plaintext")" != "$shape" ]; then
    die "the Kafka data under $KAFKA_DIR was made for '$(cat "$KAFKA_DIR/shape" 2>/dev/null || echo "brokers=1 security=plaintext")', not '$shape': stop the stack and remove $KAFKA_DIR/data (or use another DEV_DIR)"
  fi
  echo "$shape" >"$KAFKA_DIR/shape"
  if [ "$STACK_KAFKA_SECURITY" = sasl_ssl ]; then tls_make; fi
  local cluster_id n
  if [ -f "$KAFKA_DIR/cluster.id" ]; then
    cluster_id="$(cat "$KAFKA_DIR/cluster.id")"
  elif [ -f "$KAFKA_DIR/data/meta.properties" ]; then
    cluster_id="$(sed -n 's/^cluster.id=//p' "$KAFKA_DIR/data/meta.properties")"
  else
    cluster_id="$(kafka_java kafka.tools.StorageTool random-uuid 2>>"$KAFKA_DIR/format.log")"
  fi
  echo "$cluster_id" >"$KAFKA_DIR/cluster.id"
  for ((n = 1; n <= STACK_KAFKA_BROKERS; n++)); do node_up "$n" "$cluster_id"; done
  for ((n = 1; n <= STACK_KAFKA_BROKERS; n++)); do node_ready "$n"; done
}

node_down() { # node_down N
  local n="$1" d pid i
  d="$(node_dir "$n")"
  pid="$(node_pid "$n")" || { rm -f "$d/kafka.pid"; return 0; }
  log "stopping Kafka node $n (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 60; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && { log "Kafka node $n did not stop in 30s, killing"; kill -KILL "$pid" 2>/dev/null || true; }
  rm -f "$d/kafka.pid"
}

kafka_down() {
  local n d nodes=1
  # Stop every node that was started, whatever STACK_KAFKA_BROKERS says now.
  for d in "$KAFKA_DIR"/node-*; do if [ -d "$d" ]; then nodes=$((nodes + 1)); fi; done
  for ((n = nodes; n >= 1; n--)); do node_down "$n"; done
}

print_env() {
  echo "KAFKA_BOOTSTRAP=$(bootstrap_list)"
  echo "DATABASE_URL=postgresql://$PG_USER@127.0.0.1:$PG_PORT/$PG_DB"
  if [ "$STACK_KAFKA_SECURITY" = sasl_ssl ]; then
    echo "KAFKA_SECURITY_PROTOCOL=SASL_SSL"
    echo "KAFKA_SASL_MECHANISM=SCRAM-SHA-512"
    echo "KAFKA_SASL_USERNAME=$KAFKA_APP_USER"
    echo "KAFKA_SASL_PASSWORD=$KAFKA_APP_PASSWORD"
    echo "KAFKA_SSL_CAFILE=$TLS_DIR/ca.pem"
  fi
  if [ "$STACK_KAFKA_ACLS" = true ]; then
    # Not the service's: the super user that grants the service's ACLs (devkit/kafka_acls.py).
    echo "STACK_KAFKA_ADMIN_USERNAME=$KAFKA_ADMIN_USER"
    echo "STACK_KAFKA_ADMIN_PASSWORD=$KAFKA_ADMIN_PASSWORD"
  fi
  if [ "$STACK_KAFKA_BROKERS" -ge 3 ]; then
    echo "KAFKA_REPLICATION_FACTOR=3"
    echo "KAFKA_MIN_INSYNC_REPLICAS=2"
  fi
}

case "${1:-}" in
  up) pg_up; kafka_up; log "ready: Kafka $(bootstrap_list) ($STACK_KAFKA_SECURITY), PostgreSQL 127.0.0.1:$PG_PORT ($(pg_mode)) (logs in $DEV_DIR)";;
  down) kafka_down; pg_down; log "stopped";;
  pg-up) pg_up; log "ready: PostgreSQL 127.0.0.1:$PG_PORT ($(pg_mode))";;
  pg-down) pg_down;;
  status)
    for ((n = 1; n <= STACK_KAFKA_BROKERS; n++)); do
      name=kafka; [ "$STACK_KAFKA_BROKERS" = 1 ] || name="kafka node $n"
      if pid="$(node_pid "$n")"; then echo "$name: running pid $pid on 127.0.0.1:$(broker_port "$n")"; else echo "$name: stopped"; fi
    done
    if pg_bindir >/dev/null && pg_running; then echo "postgres: running on 127.0.0.1:$PG_PORT ($(pg_mode))"; else echo "postgres: stopped"; fi;;
  env) print_env;;
  node-down) node_down "${2:?usage: $0 node-down N}";;
  node-kill) pid="$(node_pid "${2:?usage: $0 node-kill N}")" && kill -KILL "$pid"; rm -f "$(node_dir "$2")/kafka.pid";;
  node-up) node_up "${2:?usage: $0 node-up N}" "$(cat "$KAFKA_DIR/cluster.id")"; node_ready "$2";;
  *) echo "usage: $0 up|down|status|env|node-down N|node-kill N|node-up N" >&2; exit 2;;
esac
