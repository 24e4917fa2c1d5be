# shellcheck shell=bash
# Apache ZooKeeper (one standalone server, QuorumPeerMain from the jar cache,
# Java 17), which ClickHouse 18.16 needs for replicated tables and which runs
# only in ClickHouse cluster mode (TRIBUTARY_CLICKHOUSE=cluster). It lives in
# $ZK_DIR and listens on ZK_PORT; its admin HTTP server is off (it would take
# port 8080), and the four-letter words ruok, srvr and mntr are allowed, for
# the readiness check and for operators.
#
# ClickHouse nodes are started after it (ch_up calls zk_up): a server that
# finds no ZooKeeper at start has its replicated tables read-only until a
# query reconnects it.
# Sourced by deploy/local/stack.sh, which sets the configuration variables.

ZK_PIDFILE=$ZK_DIR/zookeeper.pid

zk_pid() { pidfile_alive "$ZK_PIDFILE" "$ZK_DIR/zoo.cfg"; }
zk_started() { pidfile_started "$ZK_PIDFILE"; }

# zk_ready: the server serves requests. srvr, not ruok: ruok answers imok
# from a server whose start failed half way (seen: a missing jar), srvr
# prints its mode only once it serves.
zk_ready() {
	timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$ZK_PORT && printf srvr >&3 && cat <&3" 2>/dev/null | grep -q '^Mode: '
}

zk_write_config() {
	mkdir -p "$ZK_DIR/data" "$ZK_DIR/logs"
	cat >"$ZK_DIR/zoo.cfg" <<EOF
# Written by deploy/local/stack.sh on every start; edits are lost.
tickTime=2000
dataDir=$ZK_DIR/data
clientPort=$ZK_PORT
clientPortAddress=$HOST
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,mntr
# Keep the snapshot and log directory small.
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
EOF
}

zk_up() {
	local pid what="zookeeper on port $ZK_PORT" logs=$ZK_DIR/logs/zookeeper.log
	if pid=$(zk_pid); then
		wait_ready "$what" "$logs" zk_pid zk_ready || die "$WAIT_ERROR"
		log "zookeeper: running (pid $pid) on port $ZK_PORT"
		return
	fi
	zk_write_config
	# setsid: it must not die with the terminal or the make that ran us.
	setsid java -Xmx256m -Xms32m -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
		-Dorg.slf4j.simpleLogger.showDateTime=true -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
		-cp "$ZOOKEEPER_JARS/*" org.apache.zookeeper.server.quorum.QuorumPeerMain "$ZK_DIR/zoo.cfg" \
		>>"$logs" 2>&1 </dev/null 9>&- &
	echo $! >"$ZK_PIDFILE"
	if ! wait_ready "$what" "$logs" zk_started zk_ready; then
		zk_down
		die "$WAIT_ERROR"
	fi
	log "zookeeper: started (pid $(zk_pid)) on port $ZK_PORT"
}

zk_down() {
	local pid
	if pid=$(zk_pid); then
		stop_pid zookeeper "$pid" 30
		log "zookeeper: stopped"
	fi
}
