# shellcheck shell=bash
# Apache Kafka (KRaft, broker and controller in one JVM) and the embedded
# kfake broker (cmd/embedded-kafka).
# Sourced by deploy/local/stack.sh, which sets the configuration variables.

KAFKA_PIDFILE=$KAFKA_DIR/kafka.pid

kafka_pid() { pidfile_alive "$KAFKA_PIDFILE" "$KAFKA_DIR/server.properties"; }

# kafka_ready: the port answers and a metadata request lists our broker. The
# port probe first, because kcat waits for its whole timeout when nothing
# listens, which would make the polling coarse.
kafka_ready() {
	port_open "${1##*:}" && timeout 5 kcat -L -b "$1" -m 2 2>/dev/null | grep -q '1 brokers'
}

kafka_write_config() {
	mkdir -p "$KAFKA_DIR/data" "$KAFKA_DIR/logs"
	cat >"$KAFKA_DIR/server.properties" <<EOF
# Written by deploy/local/stack.sh on every start; edits are lost.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=$HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$KAFKA_PORT,CONTROLLER://$HOST:$KAFKA_CONTROLLER_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.partitions=$KAFKA_PARTITIONS
auto.create.topics.enable=true
# One node: every internal topic has one replica.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
default.replication.factor=1
min.insync.replicas=1
# Fewer internal partitions than the default 50: the first consumer group or
# transaction otherwise waits for 50 partitions to be created.
offsets.topic.num.partitions=$KAFKA_PARTITIONS
transaction.state.log.num.partitions=$KAFKA_PARTITIONS
# Tests start groups all the time; do not wait 3 s for more members.
group.initial.rebalance.delay.ms=0
EOF
	# Kafka 4 logs through log4j2; SLF4J is bound to it by the jar set.
	cat >"$KAFKA_DIR/log4j2.properties" <<EOF
# Written by deploy/local/stack.sh on every start; edits are lost.
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = $KAFKA_DIR/logs/server.log
appender.file.filePattern = $KAFKA_DIR/logs/server.log.%i
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

# kafka_tool runs a short-lived Kafka tool from the jar cache with the stack's
# logging. C1 only and the serial GC: it starts faster than the broker's JVM.
kafka_tool() {
	local main=$1
	shift
	java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m \
		-Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" -cp "$KAFKA_JARS/*" "$main" "$@"
}

kafka_started() { pidfile_started "$KAFKA_PIDFILE"; }
kafka_ready_real() { kafka_ready "$HOST:$KAFKA_PORT"; }

kafka_up() {
	local pid what="kafka on port $KAFKA_PORT" logs=$KAFKA_DIR/logs/stdout.log:$KAFKA_DIR/logs/server.log
	if pid=$(kafka_pid); then
		# Running, but perhaps still starting (another up, or a crash loop).
		wait_ready "$what" "$logs" kafka_pid kafka_ready_real || die "$WAIT_ERROR"
		log "kafka: running (pid $pid) on port $KAFKA_PORT"
		return
	fi
	kafka_write_config
	# Format once. A cluster id is 16 random bytes in URL-safe base64, which
	# we make here rather than start a JVM for `StorageTool random-uuid`;
	# like Kafka's own, it never starts with '-', which the tool's argument
	# parser would take for an option (the format then fails).
	if [[ ! -f $KAFKA_DIR/data/meta.properties ]]; then
		local cid=-
		while [[ $cid == -* ]]; do
			cid=$(openssl rand 16 | base64 | tr '+/' '-_' | tr -d '=')
		done
		kafka_tool kafka.tools.StorageTool format --standalone -t "$cid" \
			-c "$KAFKA_DIR/server.properties" >"$KAFKA_DIR/logs/format.log" 2>&1 ||
			die "kafka: storage format failed (log: $KAFKA_DIR/logs/format.log)"
		log "kafka: formatted $KAFKA_DIR/data (cluster $cid)"
	fi
	# setsid: the broker must not die with the terminal or the make that ran us.
	# shellcheck disable=SC2086 # KAFKA_HEAP is a list of JVM flags
	setsid java $KAFKA_HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError \
		-Djava.awt.headless=true -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" \
		-cp "$KAFKA_JARS/*" kafka.Kafka "$KAFKA_DIR/server.properties" \
		>"$KAFKA_DIR/logs/stdout.log" 2>&1 </dev/null 9>&- &
	echo $! >"$KAFKA_PIDFILE"
	if ! wait_ready "$what" "$logs" kafka_started kafka_ready_real; then
		kafka_down
		die "$WAIT_ERROR"
	fi
	log "kafka: started (pid $(kafka_pid)) on port $KAFKA_PORT"
}

kafka_down() {
	local pid
	if pid=$(kafka_pid); then
		stop_pid kafka "$pid" 60
		log "kafka: stopped"
	fi
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
