# shellcheck shell=bash
# ClickHouse: its own configuration and data under $TRIBUTARY_HOME/clickhouse.
# Sourced by deploy/local/stack.sh, which sets the configuration variables.
#
# CH_MODE (TRIBUTARY_CLICKHOUSE) is single, one server (node 1), or
# cluster: CH_NODES=3 servers forming the cluster $CH_CLUSTER of two shards,
# shard 1 with two replicas (nodes 1 and 2), shard 2 with one (node 3),
# replicating through ZooKeeper (stack.d/zookeeper.sh). Node 1 is the single
# server's directory and ports, so clients that know one address keep
# working; node n > 1 lives in $CH_DIR/node-n and listens on
# CH_NODE_PORT_BASE + 4(n-2) (tcp), +1 (http), +2 (interserver), +3 (TLS).

CH_CLUSTER=tributary_cluster
CH_NODES=1 # resolve_ch_mode sets it
# The stack's two ClickHouse users besides 'default' (which stays, password-
# less, on the plain port for tools and tests): the loader's, which may write,
# and the reader's, for the API and the verifier, whose profile refuses every
# write and DDL. Their passwords are made once, like the replication role's.
CH_LOADER_USER=tributary_loader
CH_READER_USER=tributary_reader
CH_LOADER_PASSWORD_FILE=$TRIBUTARY_HOME/secrets/clickhouse_loader_password
CH_READER_PASSWORD_FILE=$TRIBUTARY_HOME/secrets/clickhouse_reader_password


# resolve_ch_mode picks single or cluster: the one asked for, else the one
# the stack was created with, else single. Changing it needs a purge: the
# tables of one are not the tables of the other.
resolve_ch_mode() {
	local m=${CH_MODE_REQUESTED:-${STATE_CH_MODE:-single}}
	case $m in single | cluster) ;; *) die "TRIBUTARY_CLICKHOUSE must be single or cluster, got '$m'" ;; esac
	if [[ -n $STATE_CH_MODE && $STATE_CH_MODE != "$m" && -d $CH_DIR/data ]]; then
		die "the ClickHouse of $TRIBUTARY_HOME was created as $STATE_CH_MODE, not $m; run 'deploy/local/stack.sh down --purge' first, or use TRIBUTARY_CLICKHOUSE=$STATE_CH_MODE"
	fi
	CH_MODE=$m
	if [[ $CH_MODE == cluster ]]; then CH_NODES=3; else CH_NODES=1; fi
}

ch_node_dir() { if (($1 == 1)); then echo "$CH_DIR"; else echo "$CH_DIR/node-$1"; fi; }
ch_node_tcp_port() { if (($1 == 1)); then echo "$CH_TCP_PORT"; else echo $((CH_NODE_PORT_BASE + 4 * ($1 - 2))); fi; }
ch_node_http_port() { if (($1 == 1)); then echo "$CH_HTTP_PORT"; else echo $((CH_NODE_PORT_BASE + 4 * ($1 - 2) + 1)); fi; }
ch_node_interserver_port() { if (($1 == 1)); then echo "$CH_INTERSERVER_PORT"; else echo $((CH_NODE_PORT_BASE + 4 * ($1 - 2) + 2)); fi; }
ch_node_tls_port() { if (($1 == 1)); then echo "$CH_TCP_SECURE_PORT"; else echo $((CH_NODE_PORT_BASE + 4 * ($1 - 2) + 3)); fi; }
# ch_node_shard: nodes 1 and 2 are the replicas of shard 1, node 3 is shard 2.
ch_node_shard() { if (($1 <= 2)); then echo 1; else echo 2; fi; }

# ch_ports lists every node's four ports.
ch_ports() {
	local n
	for ((n = 1; n <= CH_NODES; n++)); do
		echo "$(ch_node_tcp_port "$n") $(ch_node_http_port "$n") $(ch_node_interserver_port "$n") $(ch_node_tls_port "$n")"
	done
}

# ch_nodes_list is the comma-separated native addresses of every node.
ch_nodes_list() {
	local n out=''
	for ((n = 1; n <= CH_NODES; n++)); do out+="${out:+,}$HOST:$(ch_node_tcp_port "$n")"; done
	echo "$out"
}

# ch_node_tls_addrs maps every node's native address, as system.clusters
# lists it, to its TLS one: a --clickhouse-node-addrs value.
ch_node_tls_addrs() {
	local n out=''
	for ((n = 1; n <= CH_NODES; n++)); do out+="${out:+,}$HOST:$(ch_node_tcp_port "$n")=$HOST:$(ch_node_tls_port "$n")"; done
	echo "$out"
}

ch_node_pidfile() { echo "$(ch_node_dir "$1")/clickhouse-server.pid"; }
ch_node_pid() { pidfile_alive "$(ch_node_pidfile "$1")" "$(ch_node_dir "$1")/config.xml"; }
ch_pid() { ch_node_pid 1; }
ch_node_query() { clickhouse-client --host "$HOST" --port "$(ch_node_tcp_port "$1")" -q "$2"; }
ch_query() { ch_node_query 1 "$1"; }

# ch_write_config copies the packaged configuration of node $1 and
# overrides paths and ports in config.d, which ClickHouse merges over
# config.xml: this survives changes to the packaged file that a text
# rewrite would not.
ch_write_config() {
	local n=$1 dir tcp tls http inter
	dir=$(ch_node_dir "$n")
	tcp=$(ch_node_tcp_port "$n") tls=$(ch_node_tls_port "$n")
	http=$(ch_node_http_port "$n") inter=$(ch_node_interserver_port "$n")
	[[ -f /etc/clickhouse-server/config.xml && -f /etc/clickhouse-server/users.xml ]] ||
		die "/etc/clickhouse-server/{config,users}.xml missing: run deploy/local/install.sh"
	mkdir -p "$dir"/{data,tmp,user_files,format_schemas,log,config.d,users.d}
	cp /etc/clickhouse-server/config.xml /etc/clickhouse-server/users.xml "$dir/"
	ch_write_users "$dir"
	rm -f "$dir/config.d/cluster.xml"
	if [[ $CH_MODE == cluster ]]; then ch_write_cluster_config "$n"; fi
	cat >"$dir/config.d/tributary.xml" <<EOF
<?xml version="1.0"?>
<!-- Written by deploy/local/stack.sh on every start; edits are lost. -->
<yandex>
    <logger>
        <level>warning</level>
        <log>$dir/log/clickhouse-server.log</log>
        <errorlog>$dir/log/clickhouse-server.err.log</errorlog>
        <size>100M</size>
        <count>2</count>
    </logger>
    <listen_host>$HOST</listen_host>
    <tcp_port>$tcp</tcp_port>
    <!-- The native protocol over TLS, with the stack's certificate
         (stack.d/tls.sh). dhParamsFile is emptied: the packaged one does
         not exist, and ECDHE needs none. -->
    <tcp_port_secure>$tls</tcp_port_secure>
    <openSSL>
        <server>
            <certificateFile>$TLS_CERT</certificateFile>
            <privateKeyFile>$TLS_KEY</privateKeyFile>
            <dhParamsFile></dhParamsFile>
            <verificationMode>none</verificationMode>
            <loadDefaultCAFile>false</loadDefaultCAFile>
            <disableProtocols>sslv2,sslv3,tlsv1,tlsv1_1</disableProtocols>
        </server>
    </openSSL>
    <http_port>$http</http_port>
    <interserver_http_port>$inter</interserver_http_port>
    <path>$dir/data/</path>
    <tmp_path>$dir/tmp/</tmp_path>
    <user_files_path>$dir/user_files/</user_files_path>
    <format_schema_path>$dir/format_schemas/</format_schema_path>
    <timezone>UTC</timezone>
    <!-- The packaged 8 GiB / 5 GiB caches are sized for a dedicated server. -->
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mark_cache_size>268435456</mark_cache_size>
</yandex>
EOF
}

# ch_write_cluster_config writes node $1's part of the cluster: the cluster
# $CH_CLUSTER (every node's tcp port), ZooKeeper, and the node's macros
# ({shard}, {replica}), which the replicated tables' ZooKeeper paths use.
# internal_replication: a Distributed insert writes one replica of a shard
# and the replicated table copies it to the others (writing every replica
# itself would apply each block twice, and skew them when one is down).
ch_write_cluster_config() {
	local n=$1 dir i shard
	dir=$(ch_node_dir "$n")
	{
		echo '<?xml version="1.0"?>'
		echo '<!-- Written by deploy/local/stack.sh on every start; edits are lost. -->'
		echo '<yandex>'
		echo '    <remote_servers>'
		echo "        <$CH_CLUSTER>"
		for shard in 1 2; do
			echo '            <shard>'
			echo '                <internal_replication>true</internal_replication>'
			for ((i = 1; i <= CH_NODES; i++)); do
				[[ $(ch_node_shard "$i") == "$shard" ]] || continue
				echo "                <replica><host>$HOST</host><port>$(ch_node_tcp_port "$i")</port></replica>"
			done
			echo '            </shard>'
		done
		echo "        </$CH_CLUSTER>"
		echo '    </remote_servers>'
		echo "    <zookeeper><node><host>$HOST</host><port>$ZK_PORT</port></node><session_timeout_ms>30000</session_timeout_ms></zookeeper>"
		echo "    <macros><shard>$(ch_node_shard "$n")</shard><replica>ch$n</replica></macros>"
		echo '    <!-- Replicas fetch parts from each other here, not at the machine hostname. -->'
		echo "    <interserver_http_host>$HOST</interserver_http_host>"
		echo '</yandex>'
	} >"$dir/config.d/cluster.xml"
}

# ch_password_hash prints the SHA-256 of the password in file $1, making the
# file first when it does not exist.
ch_password_hash() {
	if [[ ! -s $1 ]]; then
		mkdir -p "$(dirname "$1")"
		chmod 700 "$(dirname "$1")"
		(umask 077 && openssl rand -hex 24 >"$1")
	fi
	printf '%s' "$(cat "$1")" | sha256sum | cut -d' ' -f1
}

# ch_write_users writes the loader's and the reader's users to users.d, which
# ClickHouse merges over users.xml. Only the passwords' hashes are written.
# The reader's profile has readonly = 2: no INSERT, ALTER, CREATE or DROP,
# while the settings every client sends (chstore.Dial) may still be set;
# readonly itself cannot be changed back by the client.
#
# In cluster mode both profiles (default, which the loader's user has, and
# the reader's) run IN and JOIN subqueries over Distributed tables as GLOBAL
# (distributed_product_mode; schema/clickhouse.md "Cluster mode"): a client
# cannot set it itself on 18.16, whose protocol carries numeric settings only.
ch_write_users() {
	local dir=$1 loader_hash reader_hash global=''
	loader_hash=$(ch_password_hash "$CH_LOADER_PASSWORD_FILE")
	reader_hash=$(ch_password_hash "$CH_READER_PASSWORD_FILE")
	[[ $CH_MODE != cluster ]] || global='<distributed_product_mode>global</distributed_product_mode>'
	cat >"$dir/users.d/tributary.xml" <<EOF
<?xml version="1.0"?>
<!-- Written by deploy/local/stack.sh on every start; edits are lost. -->
<yandex>
    <profiles>
        <default>$global</default>
        <tributary_readonly>
            <readonly>2</readonly>$global
        </tributary_readonly>
    </profiles>
    <users>
        <$CH_LOADER_USER>
            <password_sha256_hex>$loader_hash</password_sha256_hex>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </$CH_LOADER_USER>
        <$CH_READER_USER>
            <password_sha256_hex>$reader_hash</password_sha256_hex>
            <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
            <profile>tributary_readonly</profile>
            <quota>default</quota>
        </$CH_READER_USER>
    </users>
</yandex>
EOF
	chmod 600 "$dir/users.d/tributary.xml"
}

# ch_node_starting is the liveness check while node $1 starts: the daemon
# writes its pid file a moment after the launcher returns, so no pid file yet
# counts as alive (the timeout still applies).
ch_node_starting() { [[ ! -s $(ch_node_pidfile "$1") ]] || ch_node_pid "$1" >/dev/null; }
ch_node_ready() { ch_node_query "$1" 'SELECT 1' >/dev/null 2>&1; }

# ch_node_up starts node $1 unless it runs, waits for it and makes the
# database.
ch_node_up() {
	local n=$1 pid dir what errlog
	dir=$(ch_node_dir "$n")
	what="clickhouse$( ((CH_NODES == 1)) || echo " node $n") on port $(ch_node_tcp_port "$n") (TLS $(ch_node_tls_port "$n"))"
	errlog=$dir/log/clickhouse-server.err.log
	if pid=$(ch_node_pid "$n"); then
		wait_ready "$what" "$errlog" "ch_node_pid $n" ch_node_ready "$n" || die "$WAIT_ERROR"
		log "$what: running (pid $pid)"
	else
		ch_write_config "$n"
		rm -f "$(ch_node_pidfile "$n")"
		clickhouse-server --config-file="$dir/config.xml" --pid-file="$(ch_node_pidfile "$n")" --daemon \
			>"$dir/log/stdout.log" 2>&1 9>&- ||
			die "clickhouse-server (node $n) failed to start (logs: $dir/log/)"
		if ! wait_ready "$what" "$errlog" "ch_node_starting $n" ch_node_ready "$n"; then
			ch_node_down "$n"
			die "$WAIT_ERROR"
		fi
		log "$what: started (pid $(ch_node_pid "$n" || echo '?'))"
	fi
	ch_node_query "$n" 'CREATE DATABASE IF NOT EXISTS tributary' || die "$what: CREATE DATABASE tributary failed"
}

# ch_up starts every node side by side, in cluster mode after ZooKeeper;
# a cluster is checked on node 1, which must list every node of it (proof
# that cluster.xml was read) and reach ZooKeeper.
ch_up() {
	local n jobs=() got
	if [[ $CH_MODE == cluster ]]; then zk_up; fi
	for ((n = 1; n <= CH_NODES; n++)); do jobs+=("clickhouse-node$n:ch_node_up $n"); done
	run_parallel "${jobs[@]}"
	[[ $CH_MODE == cluster ]] || return 0
	got=$(ch_query "SELECT count() FROM system.clusters WHERE cluster = '$CH_CLUSTER'") ||
		die "clickhouse: cannot read system.clusters on node 1"
	[[ $got == "$CH_NODES" ]] ||
		die "clickhouse: node 1 lists $got replicas in cluster $CH_CLUSTER, not $CH_NODES (config: $CH_DIR/config.d/cluster.xml)"
	for ((n = 1; n <= CH_NODES; n++)); do
		ch_node_query "$n" "SELECT count() FROM system.zookeeper WHERE path = '/'" >/dev/null ||
			die "clickhouse node $n cannot reach ZooKeeper on $HOST:$ZK_PORT (log: $(ch_node_dir "$n")/log/clickhouse-server.err.log)"
	done
}

ch_node_down() {
	local pid
	if pid=$(ch_node_pid "$1"); then
		stop_pid "clickhouse node $1" "$pid" 60
		log "clickhouse node $1: stopped"
	fi
}

# ch_down stops every node there is: a cluster's extra nodes too, whatever
# mode is asked for now.
ch_down() {
	local n
	for n in 1 2 3; do ch_node_down "$n" & done
	wait
}
