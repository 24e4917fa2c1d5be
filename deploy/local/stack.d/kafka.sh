# shellcheck shell=bash
# Apache Kafka (KRaft, broker and controller in one JVM per node) and the
# embedded kfake broker (cmd/embedded-kafka).
# Sourced by deploy/local/stack.sh, which sets the configuration variables.
#
# KAFKA_NODES (TRIBUTARY_KAFKA_BROKERS_COUNT) nodes run. One node keeps its
# data in $KAFKA_DIR, formatted --standalone, and every topic has one
# replica. Several nodes form a cluster: node n (1-based) lives in
# $KAFKA_DIR/node-n and listens on KAFKA_PORT+2(n-1), its controller on
# KAFKA_CONTROLLER_PORT+2(n-1); every node is a voter of the controller
# quorum (a static one: controller.quorum.voters); topics get
# min(nodes, 3) replicas by default (KAFKA_RF) and min.insync.replicas is
# one less, so that acks=all writes go on with one node down.
#
# With TRIBUTARY_SECURE=1 (SECURE) every node also has a SASL_SSL listener
# on KAFKA_SASL_PORT+2(n-1): TLS with the stack's server certificate
# (stack.d/tls.sh, as a PEM keystore) and SCRAM-SHA-512, user
# KAFKA_SASL_USER, whose password is made once in KAFKA_SASL_PASSWORD_FILE
# and set on every `up` (kafka_scram_user). The plaintext listener stays,
# on 127.0.0.1, for the stack's own checks and the tests of the plain path;
# brokers talk to each other and to the controllers over it too. A
# production cluster closes it (docs/configuration.md, "Security: TLS and users per hop").

KAFKA_SASL_USER=tributary
KAFKA_SASL_PASSWORD_FILE=$TRIBUTARY_HOME/secrets/kafka_sasl_password

kafka_node_dir() { if ((KAFKA_NODES == 1)); then echo "$KAFKA_DIR"; else echo "$KAFKA_DIR/node-$1"; fi; }
kafka_node_port() { echo $((KAFKA_PORT + 2 * ($1 - 1))); }
kafka_node_ctrl_port() { echo $((KAFKA_CONTROLLER_PORT + 2 * ($1 - 1))); }
kafka_node_sasl_port() { echo $((KAFKA_SASL_PORT + 2 * ($1 - 1))); }

# resolve_kafka_nodes picks the node count: the one asked for, else the one
# the stack was started with, else 1. Changing it needs a purge: the
# nodes' storage was formatted for the other quorum.
resolve_kafka_nodes() {
	local n=${KAFKA_NODES_REQUESTED:-${STATE_KAFKA_NODES:-1}}
	if ! [[ $n =~ ^[1-5]$ ]]; then
		die "TRIBUTARY_KAFKA_BROKERS_COUNT must be 1..5, got '$n'"
	fi
	if [[ -n $STATE_KAFKA_NODES && $STATE_KAFKA_NODES != "$n" && -d $KAFKA_DIR ]]; then
		die "the Kafka of $TRIBUTARY_HOME was created with $STATE_KAFKA_NODES node(s), not $n; run 'deploy/local/stack.sh down --purge' first, or use TRIBUTARY_KAFKA_BROKERS_COUNT=$STATE_KAFKA_NODES"
	fi
	KAFKA_NODES=$n
	KAFKA_RF=$((n < 3 ? n : 3))
	KAFKA_MIN_ISR=$((KAFKA_RF > 1 ? KAFKA_RF - 1 : 1))
}

# kafka_bootstrap is the comma-separated list of every node's broker port.
kafka_bootstrap() {
	local n out=''
	for ((n = 1; n <= KAFKA_NODES; n++)); do out+="${out:+,}$HOST:$(kafka_node_port "$n")"; done
	echo "$out"
}

# kafka_bootstrap_sasl is the same for the SASL_SSL listeners.
kafka_bootstrap_sasl() {
	local n out=''
	for ((n = 1; n <= KAFKA_NODES; n++)); do out+="${out:+,}$HOST:$(kafka_node_sasl_port "$n")"; done
	echo "$out"
}

# kafka_sasl_ports lists every node's SASL_SSL port.
kafka_sasl_ports() {
	local n
	for ((n = 1; n <= KAFKA_NODES; n++)); do kafka_node_sasl_port "$n"; done
}

# kafka_ports lists every node's broker and controller ports.
kafka_ports() {
	local n
	for ((n = 1; n <= KAFKA_NODES; n++)); do echo "$(kafka_node_port "$n") $(kafka_node_ctrl_port "$n")"; done
}

kafka_pidfile() { echo "$(kafka_node_dir "$1")/kafka.pid"; }
kafka_node_pid() { pidfile_alive "$(kafka_pidfile "$1")" "$(kafka_node_dir "$1")/server.properties"; }

# kafka_pid succeeds when any node runs, printing the pids.
kafka_pid() {
	local n pid any=1
	for ((n = 1; n <= KAFKA_NODES; n++)); do
		if pid=$(kafka_node_pid "$n"); then
			echo "$pid"
			any=0
		fi
	done
	return $any
}

# kafka_ready: the port answers and a metadata request lists all our
# brokers ($2, default 1). The port probe first, because kcat waits for its
# whole timeout when nothing listens, which would make the polling coarse.
kafka_ready() {
	port_open "${1##*:}" && timeout 5 kcat -L -b "$1" -m 2 2>/dev/null | grep -q "^ *${2:-1} brokers"
}

kafka_write_config() {
	local n=$1 dir port ctrl quorum voters='' i listeners advertised protocols secure=''
	dir=$(kafka_node_dir "$n")
	port=$(kafka_node_port "$n")
	ctrl=$(kafka_node_ctrl_port "$n")
	mkdir -p "$dir/data" "$dir/logs"
	if ((KAFKA_NODES == 1)); then
		quorum="controller.quorum.bootstrap.servers=$HOST:$ctrl"
	else
		for ((i = 1; i <= KAFKA_NODES; i++)); do voters+="${voters:+,}$i@$HOST:$(kafka_node_ctrl_port "$i")"; done
		quorum="controller.quorum.voters=$voters"
	fi
	listeners="PLAINTEXT://$HOST:$port,CONTROLLER://$HOST:$ctrl"
	protocols="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
	if ((SECURE)); then
		listeners+=",SASL_SSL://$HOST:$(kafka_node_sasl_port "$n")"
		protocols+=",SASL_SSL:SASL_SSL"
		secure="# TRIBUTARY_SECURE=1: TLS with the stack's certificate, SCRAM-SHA-512.
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$KAFKA_KEYSTORE
ssl.enabled.protocols=TLSv1.2,TLSv1.3"
	fi
	advertised=$listeners
	cat >"$dir/server.properties" <<EOF
# Written by deploy/local/stack.sh on every start; edits are lost.
process.roles=broker,controller
node.id=$n
$quorum
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
$secure
log.dirs=$dir/data
num.partitions=$KAFKA_PARTITIONS
auto.create.topics.enable=true
# $KAFKA_NODES node(s): every topic, internal ones included, has $KAFKA_RF
# replica(s) and takes an acks=all write once $KAFKA_MIN_ISR of them hold it.
offsets.topic.replication.factor=$KAFKA_RF
transaction.state.log.replication.factor=$KAFKA_RF
transaction.state.log.min.isr=$KAFKA_MIN_ISR
share.coordinator.state.topic.replication.factor=$KAFKA_RF
share.coordinator.state.topic.min.isr=$KAFKA_MIN_ISR
default.replication.factor=$KAFKA_RF
min.insync.replicas=$KAFKA_MIN_ISR
# A replica that is not in sync never becomes leader: that would drop
# acknowledged records.
unclean.leader.election.enable=false
# Fewer internal partitions than the default 50: the first consumer group or
# transaction otherwise waits for 50 partitions to be created.
offsets.topic.num.partitions=$KAFKA_PARTITIONS
transaction.state.log.num.partitions=$KAFKA_PARTITIONS
# Tests start groups all the time; do not wait 3 s for more members.
group.initial.rebalance.delay.ms=0
# A node killed with -9 comes back in seconds: its controller, starting
# again, gives the dead incarnation's registration a whole session before
# fencing it, and refuses the new one until then
# (DUPLICATE_BROKER_REGISTRATION, retried every heartbeat interval). With
# the defaults (9 s, 2 s) that was 8-10 s of every restart; the broker
# heartbeats its controller every 500 ms, so 3 s of silence (six missed
# heartbeats) still means a stalled broker, not a slow one. A stall longer
# than the session fences the broker: a single node then leads no
# partition until it is unfenced, and its group coordinator unloads and
# reloads every group (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
# consumers expelled). A fleet on a loaded machine stalls for longer
# (TRIBUTARY_KAFKA_BROKER_SESSION_MS; make fleet-verify: 30 s).
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=$KAFKA_BROKER_SESSION_MS
EOF
	# Kafka 4 logs through log4j2; SLF4J is bound to it by the jar set.
	cat >"$dir/log4j2.properties" <<EOF
# Written by deploy/local/stack.sh on every start; edits are lost.
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = $dir/logs/server.log
appender.file.filePattern = $dir/logs/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka_request.name = kafka.request.logger
logger.kafka_request.level = WARN
EOF
}

# kafka_tool runs a short-lived Kafka tool from the jar cache with node
# $1's logging. C1 only and the serial GC: it starts faster than the
# broker's JVM.
kafka_tool() {
	local dir main=$2
	dir=$(kafka_node_dir "$1")
	shift 2
	java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m \
		-Dlog4j2.configurationFile="$dir/log4j2.properties" -cp "$KAFKA_JARS/*" "$main" "$@"
}

# kafka_cluster_id is the cluster id every node is formatted with, made
# once and kept in $KAFKA_DIR. It is 16 random bytes in URL-safe base64,
# which we make here rather than start a JVM for `StorageTool random-uuid`;
# like Kafka's own, it never starts with '-', which the tool's argument
# parser would take for an option (the format then fails).
kafka_cluster_id() {
	local f=$KAFKA_DIR/cluster-id cid=-
	if [[ ! -s $f ]]; then
		mkdir -p "$KAFKA_DIR"
		while [[ $cid == -* ]]; do
			cid=$(openssl rand 16 | base64 | tr '+/' '-_' | tr -d '=')
		done
		echo "$cid" >"$f"
	fi
	cat "$f"
}

# kafka_format formats node $1's storage once: --standalone for one node,
# against the static voters of its server.properties in a cluster.
kafka_format() {
	local n=$1 dir cid mode=()
	dir=$(kafka_node_dir "$n")
	[[ -f $dir/data/meta.properties ]] && return
	cid=$(kafka_cluster_id)
	((KAFKA_NODES == 1)) && mode=(--standalone)
	kafka_tool "$n" kafka.tools.StorageTool format "${mode[@]}" -t "$cid" \
		-c "$dir/server.properties" >"$dir/logs/format.log" 2>&1 ||
		die "kafka node $n: storage format failed (log: $dir/logs/format.log)"
	log "kafka node $n: formatted $dir/data (cluster $cid)"
}

kafka_started() {
	local n
	for ((n = 1; n <= KAFKA_NODES; n++)); do pidfile_started "$(kafka_pidfile "$n")" || return 1; done
}
kafka_all_alive() {
	local n
	for ((n = 1; n <= KAFKA_NODES; n++)); do kafka_node_pid "$n" >/dev/null || return 1; done
}
# kafka_ready_real: every node answers on its own port and lists all of
# them (asking one node only would pass while another one is still down:
# the cluster fences a lost node seconds later).
kafka_ready_real() {
	local n
	for ((n = 1; n <= KAFKA_NODES; n++)); do
		kafka_ready "$HOST:$(kafka_node_port "$n")" "$KAFKA_NODES" || return 1
	done
}

# The broker's start-up is mostly the JVM loading, verifying and compiling
# some 7,000 classes: ~11 CPU-seconds to ready, which on a loaded 2-core
# machine was 1-2 minutes of wall time after every kill -9. Two things cut
# it to ~2.7 CPU-seconds (measured, deploy/local/README.md):
#   - a class-data sharing archive of Kafka's classes (KAFKA_CDS, in the jar
#     cache, made once per cache by kafka_cds_make from the classes the first
#     broker loaded); a JVM that cannot use it (another Java, other jars)
#     ignores it and starts as before;
#   - KAFKA_JIT, C1 only by default (TRIBUTARY_KAFKA_JIT: other flags, or
#     empty for the JVM's tiered default): C2 compiles cost most of the
#     start-up's CPU, and the stack's broker is a test and demo broker.
KAFKA_CDS_DIR=$KAFKA_JARS/.cds
KAFKA_CDS=$KAFKA_CDS_DIR/kafka-$KAFKA_VERSION.jsa

# kafka_cds_flags prints the JVM flags of a start: use the archive, or,
# without one, record the classes this broker loads for kafka_cds_make.
kafka_cds_flags() {
	if [[ -s $KAFKA_CDS ]]; then
		echo "-XX:SharedArchiveFile=$KAFKA_CDS"
	elif mkdir -p "$KAFKA_CDS_DIR" 2>/dev/null; then
		echo "-XX:DumpLoadedClassList=$KAFKA_CDS_DIR/classes.$$.$1"
	fi
}

# kafka_cds_make makes the archive from a class list that a broker which
# reached ready wrote, in the background (about 15 CPU-seconds, once per
# jar cache). Stacks share the cache: one maker at a time (flock), and the
# archive appears whole (mv) or not at all.
kafka_cds_make() {
	local list
	[[ -s $KAFKA_CDS ]] && return
	list=$(ls -t "$KAFKA_CDS_DIR"/classes.* 2>/dev/null | head -n1)
	[[ -s $list ]] || return 0
	(
		flock -n 8 || exit 0
		[[ -s $KAFKA_CDS ]] && exit 0
		tmp=$KAFKA_CDS.$$.tmp
		if java -Xshare:dump -XX:SharedClassListFile="$list" -XX:SharedArchiveFile="$tmp" \
			-cp "$KAFKA_JARS/*" >"$KAFKA_CDS_DIR/dump.log" 2>&1 && [[ -s $tmp ]]; then
			mv -f "$tmp" "$KAFKA_CDS"
			rm -f "$KAFKA_CDS_DIR"/classes.*
		else
			rm -f "$tmp"
		fi
	) 8>>"$KAFKA_CDS_DIR/.lock" 9>&- </dev/null >/dev/null 2>&1 &
	disown
}

# kafka_node_start launches node $1 on its formatted storage.
kafka_node_start() {
	local n=$1 dir
	dir=$(kafka_node_dir "$n")
	# setsid: the broker must not die with the terminal or the make that ran us.
	# shellcheck disable=SC2086,SC2046 # KAFKA_HEAP, KAFKA_JIT and the CDS flags are lists of JVM flags
	setsid java $KAFKA_HEAP $KAFKA_JIT $(kafka_cds_flags "$n") -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError \
		-Djava.awt.headless=true -Dlog4j2.configurationFile="$dir/log4j2.properties" \
		-cp "$KAFKA_JARS/*" kafka.Kafka "$dir/server.properties" \
		>"$dir/logs/stdout.log" 2>&1 </dev/null 9>&- &
	echo $! >"$(kafka_pidfile "$n")"
}

# kafka_secure_ensure makes what the SASL_SSL listener needs: the PEM
# keystore (the stack's server key and certificate in one file, readable
# by root only) and the SCRAM user's password.
KAFKA_KEYSTORE=$TLS_DIR/kafka-keystore.pem
kafka_secure_ensure() {
	if [[ ! -s $KAFKA_KEYSTORE || $TLS_CERT -nt $KAFKA_KEYSTORE ]]; then
		(umask 077 && cat "$TLS_KEY" "$TLS_CERT" >"$KAFKA_KEYSTORE") ||
			die "kafka: could not write the keystore $KAFKA_KEYSTORE"
	fi
	if [[ ! -s $KAFKA_SASL_PASSWORD_FILE ]]; then
		mkdir -p "$(dirname "$KAFKA_SASL_PASSWORD_FILE")"
		(umask 077 && openssl rand -hex 24 >"$KAFKA_SASL_PASSWORD_FILE")
	fi
}

# kafka_scram_user sets the SCRAM-SHA-512 password of KAFKA_SASL_USER
# (deploy/local/kafka/scram-user, over the plaintext listener), then waits
# until every SASL_SSL listener answers.
kafka_scram_user() {
	local n
	mkdir -p "$BIN_DIR"
	(cd "$REPO" && go build -o "$BIN_DIR/scram-user" ./deploy/local/kafka/scram-user) >"$KAFKA_DIR/scram-user.log" 2>&1 ||
		die "kafka: go build ./deploy/local/kafka/scram-user failed: $(tail -n 20 "$KAFKA_DIR/scram-user.log")"
	"$BIN_DIR/scram-user" --brokers "$(kafka_bootstrap)" --user "$KAFKA_SASL_USER" \
		--password-file "$KAFKA_SASL_PASSWORD_FILE" >>"$KAFKA_DIR/scram-user.log" 2>&1 ||
		die "kafka: could not set the SCRAM password of $KAFKA_SASL_USER: $(tail -n 5 "$KAFKA_DIR/scram-user.log")"
	for ((n = 1; n <= KAFKA_NODES; n++)); do
		wait_ready "kafka node $n SASL_SSL on port $(kafka_node_sasl_port "$n")" "$(kafka_node_dir "$n")/logs/server.log" \
			true port_open "$(kafka_node_sasl_port "$n")" || die "$WAIT_ERROR"
	done
	log "kafka: SASL_SSL on $(kafka_bootstrap_sasl), user $KAFKA_SASL_USER (password in $KAFKA_SASL_PASSWORD_FILE)"
}

# kafka_mode_matches tells whether running node $1 was started with the
# listeners TRIBUTARY_SECURE asks for now.
kafka_mode_matches() {
	local has=0
	grep -q '^listeners=.*SASL_SSL://' "$(kafka_node_dir "$1")/server.properties" 2>/dev/null && has=1
	((has == SECURE))
}

kafka_up() {
	local n what="kafka ($KAFKA_NODES node(s)) on $(kafka_bootstrap)" logs=''
	((SECURE == 0)) || kafka_secure_ensure
	for ((n = 1; n <= KAFKA_NODES; n++)); do
		if kafka_node_pid "$n" >/dev/null && ! kafka_mode_matches "$n"; then
			die "kafka node $n runs $( ((SECURE)) && echo without || echo with) its SASL_SSL listener, but TRIBUTARY_SECURE=$SECURE; run 'deploy/local/stack.sh down' first (the data stays)"
		fi
	done
	for ((n = 1; n <= KAFKA_NODES; n++)); do
		logs+="${logs:+:}$(kafka_node_dir "$n")/logs/stdout.log:$(kafka_node_dir "$n")/logs/server.log"
	done
	if kafka_all_alive; then
		# Running, but perhaps still starting (another up, or a crash loop).
		wait_ready "$what" "$logs" kafka_all_alive kafka_ready_real || die "$WAIT_ERROR"
		log "kafka: running (pids $(kafka_pid | xargs)) on $(kafka_bootstrap)"
		((SECURE == 0)) || kafka_scram_user
		return
	fi
	# The nodes that are down are started (a cluster that lost one gets it
	# back); a cluster answers once a majority of its voters runs.
	local started=()
	for ((n = 1; n <= KAFKA_NODES; n++)); do
		kafka_node_pid "$n" >/dev/null && continue
		kafka_write_config "$n"
		kafka_format "$n"
		kafka_node_start "$n"
		started+=("$n")
	done
	if ! wait_ready "$what" "$logs" kafka_started kafka_ready_real; then
		# Only the nodes started here: stopping the others would turn a
		# cluster that lost one node into one that lost all.
		kafka_down "${started[@]}"
		die "$WAIT_ERROR"
	fi
	log "kafka: started (pids $(kafka_pid | xargs)) on $(kafka_bootstrap)"
	kafka_cds_make
	((SECURE == 0)) || kafka_scram_user
}

# kafka_down stops every node at once (or the nodes named: kafka_down 1 3):
# one by one, the last ones would wait for a quorum that the first ones
# took away.
kafka_down() {
	local n pid nodes=("$@")
	((${#nodes[@]})) || mapfile -t nodes < <(seq 1 "$KAFKA_NODES")
	for n in "${nodes[@]}"; do
		if pid=$(kafka_node_pid "$n"); then
			(stop_pid "kafka node $n" "$pid" 60 && log "kafka node $n: stopped") &
		fi
	done
	wait
}

# --- embedded Kafka (kfake) ---

EMBEDDED_PIDFILE=$EMBEDDED_DIR/embedded-kafka.pid

embedded_pid() { pidfile_alive "$EMBEDDED_PIDFILE" "$BIN_DIR/embedded-kafka"; }

embedded_started() { pidfile_started "$EMBEDDED_PIDFILE"; }
embedded_ready() { kafka_ready "$HOST:$EMBEDDED_PORT"; }

embedded_up() {
	local pid what="embedded kafka on port $EMBEDDED_PORT" logs=$EMBEDDED_DIR/embedded-kafka.log
	if pid=$(embedded_pid); then
		wait_ready "$what" "$logs" embedded_pid embedded_ready || die "$WAIT_ERROR"
		log "embedded kafka: running (pid $pid) on port $EMBEDDED_PORT"
		return
	fi
	mkdir -p "$EMBEDDED_DIR" "$BIN_DIR"
	(cd "$REPO" && go build -o "$BIN_DIR/embedded-kafka" ./cmd/embedded-kafka) >"$EMBEDDED_DIR/build.log" 2>&1 ||
		die "embedded kafka: go build ./cmd/embedded-kafka failed: $(tail -n 20 "$EMBEDDED_DIR/build.log")"
	setsid "$BIN_DIR/embedded-kafka" --listen "$HOST:$EMBEDDED_PORT" --data-dir "$EMBEDDED_DIR/data" \
		--partitions "$KAFKA_PARTITIONS" >>"$EMBEDDED_DIR/embedded-kafka.log" 2>&1 </dev/null 9>&- &
	echo $! >"$EMBEDDED_PIDFILE"
	if ! wait_ready "$what" "$logs" embedded_started embedded_ready; then
		embedded_down
		die "$WAIT_ERROR"
	fi
	log "embedded kafka: started (pid $(embedded_pid)) on port $EMBEDDED_PORT"
}

embedded_down() {
	local pid
	if pid=$(embedded_pid); then
		stop_pid "embedded kafka" "$pid" 30
		log "embedded kafka: stopped"
	fi
}
