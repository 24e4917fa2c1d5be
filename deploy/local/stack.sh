#!/usr/bin/env bash
# The local stack of real services that the demo and the integration tests
# run against: N PostgreSQL 15 shards, ClickHouse (one server, or a cluster
# of three with ZooKeeper), Apache Kafka (KRaft, one node or a cluster)
# and/or the embedded kfake broker. Everything lives under
# $TRIBUTARY_HOME; `up` writes $TRIBUTARY_HOME/stack.env, which tells clients
# where everything is. See usage() below, or run with --help.
#
# Idempotent: `up` starts only what is not running (pid files checked against
# /proc, ports probed), so running it twice is harmless; `down` stops
# everything it finds under $TRIBUTARY_HOME. Prerequisites come from
# deploy/local/install.sh.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=deploy/local/lib.sh
source "$HERE/lib.sh"

# --- configuration -----------------------------------------------------------

TRIBUTARY_HOME=$(realpath -m "${TRIBUTARY_HOME:-$REPO/.stack}")
SHARDS_REQUESTED=${TRIBUTARY_SHARDS:-}
KAFKA_KIND=${TRIBUTARY_KAFKA:-both}
KAFKA_NODES_REQUESTED=${TRIBUTARY_KAFKA_BROKERS_COUNT:-}
KAFKA_NODES=1 # resolve_kafka_nodes (stack.d/kafka.sh) sets it
CH_MODE_REQUESTED=${TRIBUTARY_CLICKHOUSE:-}
CH_MODE=single # resolve_ch_mode (stack.d/clickhouse.sh) sets it
SCHEMA_DIR=${TRIBUTARY_SCHEMA_DIR:-$REPO/schema/postgres}
WAIT_TIMEOUT=${TRIBUTARY_WAIT_TIMEOUT:-90}
KAFKA_HEAP=${TRIBUTARY_KAFKA_HEAP:--Xmx512m -Xms128m}
# Unset: C1 only (stack.d/kafka.sh, "start-up"); set, even empty, it replaces that.
KAFKA_JIT=${TRIBUTARY_KAFKA_JIT--XX:TieredStopAtLevel=1}
# How long a Kafka node's controller waits for its heartbeat before fencing
# it (stack.d/kafka.sh, kafka_write_config): short, a kill -9'ed broker
# comes back in seconds; long, a broker stalled by a loaded machine keeps
# its partitions.
KAFKA_BROKER_SESSION_MS=${TRIBUTARY_KAFKA_BROKER_SESSION_MS:-3000}
[[ $KAFKA_BROKER_SESSION_MS =~ ^[0-9]+$ ]] && ((KAFKA_BROKER_SESSION_MS >= 1000)) || {
	echo "stack.sh: TRIBUTARY_KAFKA_BROKER_SESSION_MS must be a number of milliseconds, at least 1000 (two heartbeats of 500 ms), got '$KAFKA_BROKER_SESSION_MS'" >&2
	exit 2
}
# TRIBUTARY_SECURE=1 gives Apache Kafka a SASL_SSL listener beside the
# plaintext one (stack.d/kafka.sh); 0 leaves the stack as it always was.
# Unset, it is what this home's last `up` had (load_state), else 0: a test
# or tool that restarts a killed service keeps the stack's mode.
SECURE=${TRIBUTARY_SECURE:-}
[[ -z $SECURE || $SECURE == 0 || $SECURE == 1 ]] || {
	echo "stack.sh: TRIBUTARY_SECURE must be 0 or 1, got '$SECURE'" >&2
	exit 2
}

# TRIBUTARY_PORT_OFFSET shifts every port, so that several stacks (one per
# checkout, say) run side by side on one machine. A home remembers its
# offset (OFFSET_FILE), so a later `up` of the same home keeps its ports.
# Multiples of 200 are required: no port of one stack then equals a port of
# another (the embedded broker is 100 above the real one, for instance).
# Each family of ports (the shards', ClickHouse's, Kafka's, ...) has a
# window of 200 at its base plus the offset. The shards' family is the one
# that grows, shard i at PG_PORT_BASE+i: MAX_SHARDS (200) fills its window,
# and MAX_PORT_OFFSET keeps the highest shard port of every stack
# (55432+2400+199 = 58031) below the lowest port of any other family
# (ClickHouse http at 58123), so that no shard of one stack takes a port
# of another stack, whatever their offsets.
MAX_SHARDS=200
MAX_PORT_OFFSET=2400
OFFSET_FILE=$TRIBUTARY_HOME/port-offset
PORT_OFFSET=${TRIBUTARY_PORT_OFFSET:-$(cat "$OFFSET_FILE" 2>/dev/null || echo 0)}
[[ $PORT_OFFSET =~ ^[0-9]+$ ]] && ((PORT_OFFSET <= MAX_PORT_OFFSET && PORT_OFFSET % 200 == 0)) || {
	echo "stack.sh: TRIBUTARY_PORT_OFFSET must be a multiple of 200 in 0..$MAX_PORT_OFFSET (so two stacks share no port), got '$PORT_OFFSET'" >&2
	exit 2
}
PG_PORT_BASE=${TRIBUTARY_PG_PORT:-$((55432 + PORT_OFFSET))} # shard i listens on PG_PORT_BASE+i
CH_TCP_PORT=$((59000 + PORT_OFFSET))
CH_HTTP_PORT=$((58123 + PORT_OFFSET))
CH_INTERSERVER_PORT=$((59009 + PORT_OFFSET))
# ClickHouse cluster mode: nodes 2 and 3 take 59070..59077 (stack.d/clickhouse.sh),
# ZooKeeper 59181; no other port of any stack is one of them.
CH_NODE_PORT_BASE=$((59070 + PORT_OFFSET))
ZK_PORT=$((59181 + PORT_OFFSET))
KAFKA_PORT=$((59092 + PORT_OFFSET))
KAFKA_CONTROLLER_PORT=$((59093 + PORT_OFFSET))
EMBEDDED_PORT=$((59192 + PORT_OFFSET))
# 59440: no other port of any stack (all offsets are multiples of 200) is it.
CH_TCP_SECURE_PORT=$((59440 + PORT_OFFSET))
# Kafka's SASL_SSL listener (TRIBUTARY_SECURE=1), node n at +2(n-1): 59480..59488,
# which no other port of any stack is either.
KAFKA_SASL_PORT=$((59480 + PORT_OFFSET))
KAFKA_PARTITIONS=4
HOST=127.0.0.1

# every_stacks_ports lists, for reserve_ports, the ports above at every
# offset (Kafka's for 5 nodes, the first 32 shards'). The first stack that
# starts reserves them all, so that no outgoing connection takes a port of
# a stack that starts later as its local end in the meantime: when such a
# connection closes first, its TIME-WAIT keeps the server from binding the
# port for a minute, SO_REUSEADDR or not (seen in CI: the chaos stack's
# clients held two ports of the cluster stack that started after it).
every_stacks_ports() {
	local off base
	# off shifts this stack's ports to those of the stack at each offset.
	for ((off = -PORT_OFFSET; off <= MAX_PORT_OFFSET - PORT_OFFSET; off += 200)); do
		for base in "$CH_TCP_PORT" "$CH_HTTP_PORT" "$CH_INTERSERVER_PORT" "$ZK_PORT" "$EMBEDDED_PORT" "$CH_TCP_SECURE_PORT"; do
			echo $((base + off))
		done
		echo "$((PG_PORT_BASE + off))-$((PG_PORT_BASE + off + 31))" "$((CH_NODE_PORT_BASE + off))-$((CH_NODE_PORT_BASE + off + 7))" \
			"$((KAFKA_PORT + off))-$((KAFKA_PORT + off + 9))" "$((KAFKA_SASL_PORT + off))-$((KAFKA_SASL_PORT + off + 9))"
	done
}

# The marker that makes a directory ours: `down --purge` refuses to delete a
# TRIBUTARY_HOME that does not have it.
HOME_MARKER=.tributary-stack
STATE_FILE=$TRIBUTARY_HOME/stack.state
ENV_FILE=$TRIBUTARY_HOME/stack.env
FLEET_FILE=$TRIBUTARY_HOME/fleet.json
PASSWORD_FILE=$TRIBUTARY_HOME/secrets/repl_password

# The shards' directory. It is a symlink to /var/tmp when user postgres
# cannot reach TRIBUTARY_HOME (see pg_prepare_root); PG_ROOT is where it leads.
PG_LINK=$TRIBUTARY_HOME/pg
PG_ROOT=$(realpath -m "$PG_LINK")
PG_SOCKETS=$PG_ROOT/run
CH_DIR=$TRIBUTARY_HOME/clickhouse
ZK_DIR=$TRIBUTARY_HOME/zookeeper
KAFKA_DIR=$TRIBUTARY_HOME/kafka
EMBEDDED_DIR=$TRIBUTARY_HOME/embedded-kafka
BIN_DIR=$TRIBUTARY_HOME/bin

usage() {
	cat <<EOF
usage: deploy/local/stack.sh COMMAND [options]

Commands:
  up [--kafka real|embedded|both] [--shards N]
                  start what is not running and write \$TRIBUTARY_HOME/stack.env
  down [--purge]  stop everything; --purge also deletes \$TRIBUTARY_HOME
  status          each service with its port, pid and memory; exit 1 if one is down
  env             print stack.env

Environment:
  TRIBUTARY_HOME          all state and logs (default <repo>/.stack; now $TRIBUTARY_HOME)
  TRIBUTARY_SHARDS        PostgreSQL shards, 1..$MAX_SHARDS (default: as created, else 4); above
                          $PG_SMALL_ABOVE, each shard gets smaller memory settings (stack.d/postgres.sh)
  TRIBUTARY_KAFKA         real|embedded|both, like --kafka (default both)
  TRIBUTARY_KAFKA_BROKERS_COUNT
                          Apache Kafka nodes, 1..5 (default: as created, else 1); 3 is a
                          cluster: topics at replication factor 3, min.insync.replicas 2
  TRIBUTARY_CLICKHOUSE    single|cluster (default: as created, else single); cluster is
                          3 ClickHouse servers in cluster $CH_CLUSTER (shard 1: nodes 1
                          and 2, replicas; shard 2: node 3) and one ZooKeeper $ZOOKEEPER_VERSION
  TRIBUTARY_WAIT_TIMEOUT  seconds to wait for each service to be ready (default 90)
  TRIBUTARY_PG_PORT       port of shard 0; shard i uses it+i (default 55432)
  TRIBUTARY_PORT_OFFSET   added to every port, a multiple of 200 up to $MAX_PORT_OFFSET, for several stacks on one
                          machine (default: the offset this home was started with, else 0)
  TRIBUTARY_KAFKA_HEAP    JVM heap flags of the Kafka broker (default "-Xmx512m -Xms128m")
  TRIBUTARY_KAFKA_BROKER_SESSION_MS
                          how long a Kafka node may miss its controller's heartbeats before it
                          is fenced (default 3000: a killed broker is back in seconds; make
                          fleet-verify uses 30000, so that a stalled broker keeps its partitions)
  TRIBUTARY_KAFKA_JIT     JIT flags of the Kafka broker (default "-XX:TieredStopAtLevel=1", C1
                          only, for a fast start; empty: the JVM's tiered default)
  TRIBUTARY_SECURE        1: Apache Kafka also listens with SASL_SSL (the stack's CA, user
                          $KAFKA_SASL_USER, SCRAM-SHA-512); stack.env then names its brokers,
                          user and password file (TRIBUTARY_KAFKA_SASL_SSL_*). Default: as
                          this home's last up, else 0
  TRIBUTARY_KAFKA_JARS    Kafka jar cache (default ~/.cache/tributary/kafka-$KAFKA_VERSION)
  TRIBUTARY_ZOOKEEPER_JARS
                          ZooKeeper jar cache (default ~/.cache/tributary/zookeeper-$ZOOKEEPER_VERSION)

Ports (127.0.0.1): PostgreSQL ${PG_PORT_BASE}+i, ClickHouse tcp $CH_TCP_PORT (TLS $CH_TCP_SECURE_PORT) http $CH_HTTP_PORT,
Kafka $KAFKA_PORT (controller $KAFKA_CONTROLLER_PORT, SASL_SSL $KAFKA_SASL_PORT; node n of a cluster +2(n-1)),
embedded Kafka $EMBEDDED_PORT; cluster mode: ClickHouse node n = 2, 3 tcp $CH_NODE_PORT_BASE+4(n-2)
(http +1, interserver +2, TLS +3), ZooKeeper $ZK_PORT.
EOF
}


# shellcheck source=deploy/local/stack.d/common.sh
source "$HERE/stack.d/common.sh"
# shellcheck source=deploy/local/stack.d/tls.sh
source "$HERE/stack.d/tls.sh"
# shellcheck source=deploy/local/stack.d/postgres.sh
source "$HERE/stack.d/postgres.sh"
# shellcheck source=deploy/local/stack.d/clickhouse.sh
source "$HERE/stack.d/clickhouse.sh"
# shellcheck source=deploy/local/stack.d/kafka.sh
source "$HERE/stack.d/kafka.sh"
# shellcheck source=deploy/local/stack.d/zookeeper.sh
source "$HERE/stack.d/zookeeper.sh"

# --- stack state --------------------------------------------------------------

# load_state reads what the last `up` recorded (shard count, Kafka kind,
# PostgreSQL ports), so that status and a later up see the same stack.
STATE_SHARDS='' STATE_KAFKA='' STATE_PG_PORT='' STATE_KAFKA_NODES='' STATE_CH_MODE='' STATE_SECURE=''
load_state() {
	if [[ ! -f $STATE_FILE ]]; then
		SECURE=${SECURE:-0}
		return 0
	fi
	STATE_SECURE=$(sed -n 's/^secure=//p' "$STATE_FILE")
	SECURE=${SECURE:-${STATE_SECURE:-0}}
	STATE_SHARDS=$(sed -n 's/^shards=//p' "$STATE_FILE")
	STATE_KAFKA=$(sed -n 's/^kafka=//p' "$STATE_FILE")
	STATE_KAFKA_NODES=$(sed -n 's/^kafka_nodes=//p' "$STATE_FILE")
	STATE_PG_PORT=$(sed -n 's/^pg_port=//p' "$STATE_FILE")
	STATE_CH_MODE=$(sed -n 's/^clickhouse=//p' "$STATE_FILE")
	[[ -n ${TRIBUTARY_PG_PORT:-} || -z $STATE_PG_PORT ]] || PG_PORT_BASE=$STATE_PG_PORT
}

save_state() {
	printf 'shards=%s\nkafka=%s\npg_port=%s\nkafka_nodes=%s\nclickhouse=%s\nsecure=%s\n' "$SHARDS" "$KAFKA_KIND" "$PG_PORT_BASE" "$KAFKA_NODES" "$CH_MODE" "$SECURE" >"$STATE_FILE"
}

# resolve_shards picks the shard count: the one asked for, else the one the
# data was created with, else 4. Changing it needs a purge: each shard's
# tributary.shard_config (and so every id it issued) depends on it.
resolve_shards() {
	local n=${SHARDS_REQUESTED:-${STATE_SHARDS:-4}}
	if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 1 || n > MAX_SHARDS)); then
		die "TRIBUTARY_SHARDS must be 1..$MAX_SHARDS (shard i listens on the shards' port base + i, in a window of 200 ports per stack), got '$n'"
	fi
	if [[ -n $STATE_SHARDS && $STATE_SHARDS != "$n" ]]; then
		die "the stack in $TRIBUTARY_HOME was created with $STATE_SHARDS shards, not $n; run 'deploy/local/stack.sh down --purge' first, or use TRIBUTARY_SHARDS=$STATE_SHARDS"
	fi
	SHARDS=$n
	if ! [[ $PG_PORT_BASE =~ ^[0-9]+$ ]] || ((PG_PORT_BASE < 1024 || PG_PORT_BASE + n > 65535)); then
		die "TRIBUTARY_PG_PORT must be a port in 1024..$((65535 - n)), got '$PG_PORT_BASE'"
	fi
	if [[ -n $STATE_PG_PORT && $STATE_PG_PORT != "$PG_PORT_BASE" ]] && pg_running 0; then
		die "the shards run on ports from $STATE_PG_PORT, not $PG_PORT_BASE; run 'deploy/local/stack.sh down' first to move them"
	fi
}

wants_real() { [[ $KAFKA_KIND == real || $KAFKA_KIND == both ]]; }
wants_embedded() { [[ $KAFKA_KIND == embedded || $KAFKA_KIND == both ]]; }

# --- commands ----------------------------------------------------------------------

# preflight checks everything that can be checked before starting anything,
# so that a missing tool or a taken port fails in a second, not after a minute.
preflight() {
	local t n
	# PostgreSQL refuses to run as root, so the shards run as user postgres,
	# through runuser, which needs root.
	[[ $(id -u) == 0 ]] || die "stack.sh runs as root (it starts PostgreSQL as user postgres with runuser)"
	for t in psql runuser clickhouse-server clickhouse-client kcat openssl; do
		command -v "$t" >/dev/null || die "$t not found: run deploy/local/install.sh"
	done
	[[ -x $PG_BIN/initdb ]] || die "PostgreSQL 15 not found in $PG_BIN: run deploy/local/install.sh"
	if wants_real && ! kafka_all_alive; then
		command -v java >/dev/null || die "java not found (Kafka needs Java 17+): run deploy/local/install.sh"
		((SECURE == 0)) || command -v go >/dev/null || die "go not found (TRIBUTARY_SECURE=1 builds deploy/local/kafka/scram-user to make Kafka's SCRAM user)"
		jars_complete "$KAFKA_JARS" ||
			die "Kafka $KAFKA_VERSION jars missing or incomplete in $KAFKA_JARS: run deploy/local/install.sh"
		local port ctrl
		n=1
		while read -r port ctrl; do
			kafka_node_pid "$n" >/dev/null || {
				require_port_free "$port" "kafka node $n"
				require_port_free "$ctrl" "the controller of kafka node $n"
				((SECURE == 0)) || require_port_free "$(kafka_node_sasl_port "$n")" "the SASL_SSL listener of kafka node $n"
			}
			n=$((n + 1))
		done < <(kafka_ports)
	fi
	if wants_embedded && ! embedded_pid >/dev/null; then
		command -v go >/dev/null || die "go not found (needed to build cmd/embedded-kafka); install Go or use --kafka real"
		require_port_free "$EMBEDDED_PORT" "embedded kafka"
	fi
	local tcp http inter tls
	n=1
	while read -r tcp http inter tls; do
		ch_node_pid "$n" >/dev/null || {
			require_port_free "$tcp" "clickhouse node $n (tcp)"
			require_port_free "$http" "clickhouse node $n (http)"
			require_port_free "$inter" "clickhouse node $n (interserver)"
			require_port_free "$tls" "clickhouse node $n (tcp, TLS)"
		}
		n=$((n + 1))
	done < <(ch_ports)
	if [[ $CH_MODE == cluster ]] && ! zk_pid >/dev/null; then
		command -v java >/dev/null || die "java not found (ZooKeeper needs Java 17+): run deploy/local/install.sh"
		jars_complete "$ZOOKEEPER_JARS" "zookeeper-$ZOOKEEPER_VERSION.jar" ||
			die "ZooKeeper $ZOOKEEPER_VERSION jars missing or incomplete in $ZOOKEEPER_JARS: run deploy/local/install.sh"
		require_port_free "$ZK_PORT" zookeeper
	fi
	local i
	for ((i = 0; i < SHARDS; i++)); do
		pg_running "$i" || require_port_free "$(pg_port "$i")" "postgres shard $i"
	done
}

# write_env writes stack.env atomically, readable by the owner only (it holds
# the replication password).
write_env() {
	local tmp i pw port
	pw=$(cat "$PASSWORD_FILE")
	tmp=$(mktemp "$TRIBUTARY_HOME/.stack.env.XXXXXX")
	chmod 600 "$tmp"
	{
		echo "TRIBUTARY_HOME=$TRIBUTARY_HOME"
		echo "TRIBUTARY_SHARDS=$SHARDS"
		for ((i = 0; i < SHARDS; i++)); do
			port=$(pg_port "$i")
			echo "TRIBUTARY_SHARD_${i}_DSN=postgres://postgres@$HOST:$port/app?sslmode=disable"
			echo "TRIBUTARY_SHARD_${i}_REPL_DSN=postgres://tributary_repl:$pw@$HOST:$port/app?sslmode=disable"
		done
		echo "TRIBUTARY_CLICKHOUSE_ADDR=$HOST:$CH_TCP_PORT"
		echo "TRIBUTARY_CLICKHOUSE_HTTP=$HOST:$CH_HTTP_PORT"
		echo "TRIBUTARY_CLICKHOUSE_TLS_ADDR=$HOST:$CH_TCP_SECURE_PORT"
		echo "TRIBUTARY_STACK_CA_FILE=$TLS_CA"
		echo "TRIBUTARY_CLICKHOUSE_LOADER_USER=$CH_LOADER_USER"
		echo "TRIBUTARY_CLICKHOUSE_LOADER_PASSWORD_FILE=$CH_LOADER_PASSWORD_FILE"
		echo "TRIBUTARY_CLICKHOUSE_READER_USER=$CH_READER_USER"
		echo "TRIBUTARY_CLICKHOUSE_READER_PASSWORD_FILE=$CH_READER_PASSWORD_FILE"
		echo "TRIBUTARY_CLICKHOUSE_MODE=$CH_MODE"
		if [[ $CH_MODE == cluster ]]; then
			echo "TRIBUTARY_CLICKHOUSE_CLUSTER=$CH_CLUSTER"
			echo "TRIBUTARY_CLICKHOUSE_NODES=$(ch_nodes_list)"
			# Not TRIBUTARY_CLICKHOUSE_NODE_ADDRS itself: a client that
			# sources this file speaks plaintext to the nodes.
			echo "TRIBUTARY_CLICKHOUSE_NODE_TLS_ADDRS=$(ch_node_tls_addrs)"
			echo "TRIBUTARY_ZOOKEEPER=$HOST:$ZK_PORT"
		fi
		if wants_real; then
			echo "TRIBUTARY_KAFKA_BROKERS=$(kafka_bootstrap)"
			echo "TRIBUTARY_KAFKA_BROKERS_COUNT=$KAFKA_NODES"
			if ((SECURE)); then
				# Not TRIBUTARY_KAFKA_SASL_USER itself: a client that
				# sources this file then still speaks plaintext to
				# TRIBUTARY_KAFKA_BROKERS; demo.sh maps these when secure.
				echo "TRIBUTARY_KAFKA_SASL_SSL_BROKERS=$(kafka_bootstrap_sasl)"
				echo "TRIBUTARY_KAFKA_SASL_SSL_USER=$KAFKA_SASL_USER"
				echo "TRIBUTARY_KAFKA_SASL_SSL_PASSWORD_FILE=$KAFKA_SASL_PASSWORD_FILE"
			fi
		else
			echo "TRIBUTARY_KAFKA_BROKERS=$HOST:$EMBEDDED_PORT"
		fi
		wants_embedded && echo "TRIBUTARY_EMBEDDED_KAFKA_BROKERS=$HOST:$EMBEDDED_PORT"
		echo "TRIBUTARY_KAFKA_KIND=$KAFKA_KIND"
		echo "TRIBUTARY_PORT_OFFSET=$PORT_OFFSET"
		echo "TRIBUTARY_FLEET=$FLEET_FILE"
	} >"$tmp"
	write_fleet
	mv "$tmp" "$ENV_FILE"
}

# write_fleet writes the fleet file of the stack's shards (docs/configuration.md "Fleet
# file"): each shard's number and the stack.env variables holding its DSNs,
# never a DSN itself, so it may be world-readable.
write_fleet() {
	local tmp i sep=''
	tmp=$(mktemp "$TRIBUTARY_HOME/.fleet.json.XXXXXX")
	chmod 644 "$tmp"
	{
		echo '{"shards": ['
		for ((i = 0; i < SHARDS; i++)); do
			printf '%s  {"shard": %d, "name": "shard%d", "dsn_env": "TRIBUTARY_SHARD_%d_DSN", "reader_dsn_env": "TRIBUTARY_SHARD_%d_REPL_DSN"}' \
				"$sep" "$i" "$i" "$i" "$i"
			sep=$',\n'
		done
		printf '\n]}\n'
	} >"$tmp"
	mv "$tmp" "$FLEET_FILE"
}

# lock serializes stack.sh runs on one TRIBUTARY_HOME (two test packages may
# bring the stack up at the same time). The lock is fd 9: every service is
# started with 9>&-, or it would inherit the lock and hold it forever.
lock() {
	mkdir -p "$TRIBUTARY_HOME"
	exec 9>>"$TRIBUTARY_HOME/.lock"
	flock -w 600 9 || die "another stack.sh holds $TRIBUTARY_HOME/.lock for 10 minutes; is one stuck?"
}

cmd_up() {
	case $KAFKA_KIND in real | embedded | both) ;; *) die "--kafka must be real, embedded or both, got '$KAFKA_KIND'" ;; esac
	if [[ -d $TRIBUTARY_HOME && -n $(ls -A "$TRIBUTARY_HOME" 2>/dev/null) && ! -f $TRIBUTARY_HOME/$HOME_MARKER ]]; then
		die "$TRIBUTARY_HOME exists, is not empty and was not made by stack.sh; choose another TRIBUTARY_HOME"
	fi
	lock
	touch "$TRIBUTARY_HOME/$HOME_MARKER"
	if [[ -f $OFFSET_FILE && $(cat "$OFFSET_FILE") != "$PORT_OFFSET" ]]; then
		die "$TRIBUTARY_HOME was started with TRIBUTARY_PORT_OFFSET=$(cat "$OFFSET_FILE"), not $PORT_OFFSET; use that offset, or another TRIBUTARY_HOME"
	fi
	echo "$PORT_OFFSET" >"$OFFSET_FILE"
	load_state
	resolve_shards
	resolve_kafka_nodes
	resolve_ch_mode
	log "up: $SHARDS shards, kafka $KAFKA_KIND ($KAFKA_NODES node(s)), clickhouse $CH_MODE ($CH_NODES node(s)), home $TRIBUTARY_HOME"
	# shellcheck disable=SC2046 # one port or range a word
	reserve_ports $(every_stacks_ports)
	# shellcheck disable=SC2046 # one port a word
	reserve_ports "$PG_PORT_BASE-$((PG_PORT_BASE + SHARDS - 1))" $(ch_ports) \
		$(kafka_ports) $( ((SECURE)) && kafka_sasl_ports) "$EMBEDDED_PORT" $([[ $CH_MODE != cluster ]] || echo "$ZK_PORT")
	preflight

	if [[ ! -s $PASSWORD_FILE ]]; then
		mkdir -p "$(dirname "$PASSWORD_FILE")"
		chmod 700 "$(dirname "$PASSWORD_FILE")"
		(umask 077 && openssl rand -hex 24 >"$PASSWORD_FILE")
	fi
	save_state
	tls_ensure
	pg_prepare_root

	# A Kafka kind no longer asked for is stopped, so that the stack matches
	# what stack.env says.
	wants_real || kafka_down
	wants_embedded || embedded_down
	[[ $CH_MODE == cluster ]] || zk_down

	# The services are independent: start them side by side. The JVM is the
	# slowest, so it goes first.
	local jobs=()
	wants_real && jobs+=("kafka:kafka_up")
	wants_embedded && jobs+=("embedded-kafka:embedded_up")
	jobs+=("clickhouse:ch_up" "postgres:pg_up_all")
	run_parallel "${jobs[@]}"

	write_env
	log "up: ready; environment in $ENV_FILE"
}

cmd_down() {
	local purge=$1
	if [[ ! -d $TRIBUTARY_HOME ]]; then
		log "down: nothing at $TRIBUTARY_HOME"
		return
	fi
	[[ -f $TRIBUTARY_HOME/$HOME_MARKER ]] ||
		die "$TRIBUTARY_HOME was not made by stack.sh (no $HOME_MARKER); refusing to touch it"
	lock
	load_state
	KAFKA_NODES_REQUESTED='' resolve_kafka_nodes
	CH_MODE_REQUESTED='' resolve_ch_mode
	# stack.env goes first: it must never describe services that are gone.
	rm -f "$ENV_FILE" "$FLEET_FILE"
	run_parallel "kafka:kafka_down" "embedded-kafka:embedded_down" "clickhouse:ch_down" "postgres:pg_down_all" "zookeeper:zk_down"
	if [[ $purge == 1 ]]; then
		pg_purge_outside
		rm -rf -- "$TRIBUTARY_HOME"
		log "down: stopped and removed $TRIBUTARY_HOME"
	else
		log "down: stopped (data kept in $TRIBUTARY_HOME; --purge removes it)"
	fi
}

# mem_of prints the RSS of a process and the PSS of it and its children, in
# MiB, separated by a space. PSS divides shared memory (PostgreSQL's shared
# buffers) among the processes that map it, so the tree's sum is what the
# service really costs; summing RSS would count shared pages many times.
mem_of() {
	local pid=$1 rss pss=0 p k
	rss=$(awk '/^VmRSS:/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status" 2>/dev/null || echo '?')
	for p in "$pid" $(ps -o pid= --ppid "$pid" 2>/dev/null); do
		k=$(awk '/^Pss:/ { print $2 }' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
		pss=$((pss + ${k:-0}))
	done
	printf '%s %s' "$rss" $((pss / 1024))
}

cmd_status() {
	load_state
	KAFKA_NODES_REQUESTED='' resolve_kafka_nodes
	CH_MODE_REQUESTED='' resolve_ch_mode
	local shards=${STATE_SHARDS:-0} kind=${STATE_KAFKA:-} down=0 i pid n
	if [[ -z $kind ]]; then
		log "status: no stack at $TRIBUTARY_HOME (run deploy/local/stack.sh up)"
		return 1
	fi
	local fmt='%-18s %-18s %-8s %-6s %8s %13s\n'
	# shellcheck disable=SC2059 # the format is ours
	printf "$fmt" SERVICE PORT PID STATE RSS_MiB TREE_PSS_MiB
	# status_row prints one service; an empty pid means it is down.
	status_row() {
		local name=$1 port=$2 pid=$3 rss pss
		if [[ -n $pid ]]; then
			read -r rss pss <<<"$(mem_of "$pid")"
			# shellcheck disable=SC2059
			printf "$fmt" "$name" "$port" "$pid" up "$rss" "$pss"
		else
			# shellcheck disable=SC2059
			printf "$fmt" "$name" "$port" - DOWN - -
			down=$((down + 1))
		fi
	}
	for ((i = 0; i < shards; i++)); do
		pid=''
		if pg_running "$i"; then pid=$(head -n1 "$(pg_dir "$i")/postmaster.pid"); fi
		status_row "postgres-shard$i" "$(pg_port "$i")" "$pid"
	done
	for ((n = 1; n <= CH_NODES; n++)); do
		status_row "clickhouse$( ((CH_NODES == 1)) || echo "-node$n")" "$(ch_node_tcp_port "$n"),$(ch_node_tls_port "$n"),$(ch_node_http_port "$n")" "$(ch_node_pid "$n" || true)"
	done
	[[ $CH_MODE != cluster ]] || status_row zookeeper "$ZK_PORT" "$(zk_pid || true)"
	if [[ $kind != embedded ]]; then
		for ((n = 1; n <= KAFKA_NODES; n++)); do
			status_row "kafka$( ((KAFKA_NODES == 1)) || echo "-node$n")" "$(kafka_node_port "$n"),$(kafka_node_ctrl_port "$n")" "$(kafka_node_pid "$n" || true)"
		done
	fi
	if [[ $kind != real ]]; then status_row embedded-kafka "$EMBEDDED_PORT" "$(embedded_pid || true)"; fi
	((down == 0))
}

cmd_env() {
	[[ -f $ENV_FILE ]] || die "no $ENV_FILE: the stack is not up (run deploy/local/stack.sh up)"
	cat "$ENV_FILE"
}

main() {
	local cmd=${1:-}
	[[ $# -gt 0 ]] && shift
	local purge=0
	while [[ $# -gt 0 ]]; do
		case $1 in
		--kafka) [[ $# -ge 2 ]] || die "--kafka needs a value"; KAFKA_KIND=$2; shift 2 ;;
		--kafka=*) KAFKA_KIND=${1#*=}; shift ;;
		--shards) [[ $# -ge 2 ]] || die "--shards needs a value"; SHARDS_REQUESTED=$2; shift 2 ;;
		--shards=*) SHARDS_REQUESTED=${1#*=}; shift ;;
		--purge) purge=1; shift ;;
		-h | --help) usage; return ;;
		*) usage >&2; die "unknown option: $1" ;;
		esac
	done
	case $cmd in
	up) cmd_up ;;
	down) cmd_down "$purge" ;;
	status) cmd_status ;;
	env) cmd_env ;;
	-h | --help | help) usage ;;
	"") usage >&2; exit 2 ;;
	*) usage >&2; die "unknown command: $cmd" ;;
	esac
}

main "$@"
