# shellcheck shell=bash
# ClickHouse: its own configuration and data under $TRIBUTARY_HOME/clickhouse.
# Sourced by deploy/local/stack.sh, which sets the configuration variables.

CH_PIDFILE=$CH_DIR/clickhouse-server.pid
# The stack's two ClickHouse users besides 'default' (which stays, password-
# less, on the plain port for tools and tests): the loader's, which may write,
# and the reader's, for the API and the verifier, whose profile refuses every
# write and DDL. Their passwords are made once, like the replication role's.
CH_LOADER_USER=tributary_loader
CH_READER_USER=tributary_reader
CH_LOADER_PASSWORD_FILE=$TRIBUTARY_HOME/secrets/clickhouse_loader_password
CH_READER_PASSWORD_FILE=$TRIBUTARY_HOME/secrets/clickhouse_reader_password

ch_pid() { pidfile_alive "$CH_PIDFILE" "$CH_DIR/config.xml"; }
ch_query() { clickhouse-client --host "$HOST" --port "$CH_TCP_PORT" -q "$1"; }

# ch_write_config copies the packaged configuration and overrides paths and
# ports in config.d, which ClickHouse merges over config.xml: this survives
# changes to the packaged file that a text rewrite would not.
ch_write_config() {
	[[ -f /etc/clickhouse-server/config.xml && -f /etc/clickhouse-server/users.xml ]] ||
		die "/etc/clickhouse-server/{config,users}.xml missing: run deploy/local/install.sh"
	mkdir -p "$CH_DIR"/{data,tmp,user_files,format_schemas,log,config.d,users.d}
	cp /etc/clickhouse-server/config.xml /etc/clickhouse-server/users.xml "$CH_DIR/"
	ch_write_users
	cat >"$CH_DIR/config.d/tributary.xml" <<EOF
<?xml version="1.0"?>
<!-- Written by deploy/local/stack.sh on every start; edits are lost. -->
<yandex>
    <logger>
        <level>warning</level>
        <log>$CH_DIR/log/clickhouse-server.log</log>
        <errorlog>$CH_DIR/log/clickhouse-server.err.log</errorlog>
        <size>100M</size>
        <count>2</count>
    </logger>
    <listen_host>$HOST</listen_host>
    <tcp_port>$CH_TCP_PORT</tcp_port>
    <!-- The native protocol over TLS, with the stack's certificate
         (stack.d/tls.sh). dhParamsFile is emptied: the packaged one does
         not exist, and ECDHE needs none. -->
    <tcp_port_secure>$CH_TCP_SECURE_PORT</tcp_port_secure>
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
    <http_port>$CH_HTTP_PORT</http_port>
    <interserver_http_port>$CH_INTERSERVER_PORT</interserver_http_port>
    <path>$CH_DIR/data/</path>
    <tmp_path>$CH_DIR/tmp/</tmp_path>
    <user_files_path>$CH_DIR/user_files/</user_files_path>
    <format_schema_path>$CH_DIR/format_schemas/</format_schema_path>
    <timezone>UTC</timezone>
    <!-- The packaged 8 GiB / 5 GiB caches are sized for a dedicated server. -->
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mark_cache_size>268435456</mark_cache_size>
</yandex>
EOF
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
ch_write_users() {
	local loader_hash reader_hash
	loader_hash=$(ch_password_hash "$CH_LOADER_PASSWORD_FILE")
	reader_hash=$(ch_password_hash "$CH_READER_PASSWORD_FILE")
	cat >"$CH_DIR/users.d/tributary.xml" <<EOF
<?xml version="1.0"?>
<!-- Written by deploy/local/stack.sh on every start; edits are lost. -->
<yandex>
    <profiles>
        <tributary_readonly>
            <readonly>2</readonly>
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
	chmod 600 "$CH_DIR/users.d/tributary.xml"
}

# ch_starting is the liveness check while ClickHouse starts: the daemon
# writes its pid file a moment after the launcher returns, so no pid file yet
# counts as alive (the timeout still applies).
ch_starting() { [[ ! -s $CH_PIDFILE ]] || ch_pid >/dev/null; }
ch_ready() { ch_query 'SELECT 1' >/dev/null 2>&1; }

ch_up() {
	local pid what="clickhouse on port $CH_TCP_PORT (TLS $CH_TCP_SECURE_PORT)" errlog=$CH_DIR/log/clickhouse-server.err.log
	if pid=$(ch_pid); then
		wait_ready "$what" "$errlog" ch_pid ch_ready || die "$WAIT_ERROR"
		log "clickhouse: running (pid $pid) on port $CH_TCP_PORT"
	else
		ch_write_config
		rm -f "$CH_PIDFILE"
		clickhouse-server --config-file="$CH_DIR/config.xml" --pid-file="$CH_PIDFILE" --daemon \
			>"$CH_DIR/log/stdout.log" 2>&1 9>&- ||
			die "clickhouse-server failed to start (logs: $CH_DIR/log/)"
		if ! wait_ready "$what" "$errlog" ch_starting ch_ready; then
			ch_down
			die "$WAIT_ERROR"
		fi
		log "clickhouse: started (pid $(ch_pid || echo '?')) on port $CH_TCP_PORT"
	fi
	ch_query 'CREATE DATABASE IF NOT EXISTS tributary' || die "clickhouse: CREATE DATABASE tributary failed"
}

ch_down() {
	local pid
	if pid=$(ch_pid); then
		stop_pid clickhouse "$pid" 60
		log "clickhouse: stopped"
	fi
}
