# shellcheck shell=bash
# PostgreSQL 15 shards: initdb, configuration, start/stop, schema and roles.
# Sourced by deploy/local/stack.sh, which sets the configuration variables.

pg_dir() { printf '%s/shard%s' "$PG_ROOT" "$1"; }
pg_port() { printf '%s' $((PG_PORT_BASE + $1)); }
as_postgres() { runuser -u postgres -- "$@"; }

# pg_running tells whether shard i's postmaster runs: the pid its pid file
# names is a postgres of that data directory. What pg_ctl status checks,
# without a runuser and a pg_ctl per shard (seconds each on a loaded
# machine, and every `up` asks each shard twice).
pg_running() {
	local dir pid
	dir=$(pg_dir "$1")
	[[ -s $dir/postmaster.pid ]] || return 1
	pid=$(head -n1 "$dir/postmaster.pid")
	pid_matches "$pid" "postgres -D $dir "
}

# psql_super runs SQL from stdin as the superuser on shard i, database db.
psql_super() {
	local i=$1 db=$2
	shift 2
	psql "postgres://postgres@$HOST:$(pg_port "$i")/$db?sslmode=disable" \
		-X -q -v ON_ERROR_STOP=1 "$@"
}

# pg_outside_dir names a directory outside TRIBUTARY_HOME that belongs to
# this TRIBUTARY_HOME alone: $1 is what it holds (pg, sock).
pg_outside_dir() {
	printf '%s/tributary-%s-%s' "$2" "$1" "$(printf '%s' "$TRIBUTARY_HOME" | sha256sum | cut -c1-12)"
}

# pg_prepare_root creates the directories that user postgres must own. The
# server refuses to run as root, so data, sockets and logs belong to postgres.
# Two cases are moved out of TRIBUTARY_HOME, since CI may check out anywhere:
#   - postgres cannot reach TRIBUTARY_HOME (a parent directory such as /root
#     is not searchable by others): the data goes to /var/tmp, and
#     TRIBUTARY_HOME/pg links to it;
#   - the socket path would be longer than a Unix socket allows (107 bytes):
#     the sockets go to /tmp (clients of the stack use TCP anyway).
pg_prepare_root() {
	if [[ ! -e $PG_LINK ]]; then
		mkdir -p "$PG_LINK"
		chown postgres:postgres "$PG_LINK"
		if ! as_postgres test -w "$PG_LINK"; then
			local alt
			alt=$(pg_outside_dir pg /var/tmp)
			rmdir "$PG_LINK"
			mkdir -p "$alt"
			chown postgres:postgres "$alt"
			ln -s "$alt" "$PG_LINK"
			log "postgres: user postgres cannot reach $TRIBUTARY_HOME; shard data in $alt (linked from $PG_LINK)"
		fi
	fi
	PG_ROOT=$(realpath "$PG_LINK")
	PG_SOCKETS=$PG_ROOT/run
	if ((${#PG_SOCKETS} + 20 > 107)); then
		PG_SOCKETS=$(pg_outside_dir sock /tmp)
	fi
	mkdir -p "$PG_SOCKETS"
	chown postgres:postgres "$PG_ROOT" "$PG_SOCKETS"
	chmod 700 "$PG_SOCKETS"
	as_postgres test -w "$PG_ROOT" ||
		die "user postgres cannot write $PG_ROOT; set TRIBUTARY_HOME to a directory it can reach, e.g. /var/tmp/tributary"
}

# pg_purge_outside removes what pg_prepare_root put outside TRIBUTARY_HOME.
pg_purge_outside() {
	if [[ -L $PG_LINK ]]; then
		rm -rf -- "$(realpath -m "$PG_LINK")"
	fi
	rm -rf -- "$(pg_outside_dir sock /tmp)"
}

# PG_SMALL_ABOVE: a stack of more shards than this gives each shard small
# memory settings (pg_sizing), so that a fleet of many shards on one machine
# is bounded by what it touches, not by 128 MB of shared buffers each.
PG_SMALL_ABOVE=32

# pg_sizing prints the memory and connection settings of a shard of a stack
# of $SHARDS shards. Up to PG_SMALL_ABOVE, PostgreSQL's defaults and room
# for the tests' own slots (each test makes and drops its own). Above, what
# the demo needs and little more: a reader takes one walsender and one
# slot per shard and a few connections (its SQL connection, snapshot
# workers), loadgen and verify one each, so 8 walsenders, 8 slots and 32
# connections leave room for a second reader and tributaryctl; 16 MB of
# shared buffers bound each shard's shared memory to about 20 MB, where
# 128 MB each would let 128 shards grow to 16 GB under load.
pg_sizing() {
	if ((SHARDS <= PG_SMALL_ABOVE)); then
		printf '%s\n' 'max_replication_slots = 20' 'max_wal_senders = 20'
		return
	fi
	printf '%s\n' 'max_replication_slots = 8' 'max_wal_senders = 8' 'max_connections = 32' \
		'shared_buffers = 16MB' 'work_mem = 2MB' 'maintenance_work_mem = 16MB' \
		'autovacuum_max_workers = 1'
}

# pg_write_config writes the shard's settings and access rules; postgresql.conf
# includes tributary.conf, so initdb's defaults stay visible beside ours.
pg_write_config() {
	local i=$1 dir
	dir=$(pg_dir "$i")
	# TLS with the stack's certificate (stack.d/tls.sh), copied into the
	# data directory because the server wants its key owned by postgres and
	# private. Plain connections still work: pg_hba's 'host' lines match both.
	install -o postgres -g postgres -m 644 "$TLS_CERT" "$dir/server.crt"
	install -o postgres -g postgres -m 600 "$TLS_KEY" "$dir/server.key"
	as_postgres tee "$dir/tributary.conf" >/dev/null <<EOF
# Written by deploy/local/stack.sh on every start; edits are lost.
cluster_name = 'tributary-shard$i'
listen_addresses = '$HOST'
port = $(pg_port "$i")
unix_socket_directories = '$PG_SOCKETS'
wal_level = logical
$(pg_sizing)
# on: a commit reaches the walsender at once (with off, up to wal_writer_delay later).
synchronous_commit = on
password_encryption = 'scram-sha-256'
log_line_prefix = '%m [%p] %q%u@%d '
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
ssl_min_protocol_version = 'TLSv1.2'
EOF
	grep -q "^include 'tributary.conf'" "$dir/postgresql.conf" ||
		echo "include 'tributary.conf'" | as_postgres tee -a "$dir/postgresql.conf" >/dev/null
	# The first match wins. Logical replication connections match the
	# database name (app); the 'replication' lines are for physical ones.
	as_postgres tee "$dir/pg_hba.conf" >/dev/null <<EOF
# Written by deploy/local/stack.sh on every start; edits are lost.
# TYPE  DATABASE     USER            ADDRESS        METHOD
local   all          postgres                       trust
host    all          postgres        $HOST/32   trust
host    replication  postgres        $HOST/32   trust
host    app          tributary_repl  $HOST/32   scram-sha-256
host    replication  tributary_repl  $HOST/32   scram-sha-256
EOF
}

# PUB_TABLES are the demo's replicated tables: every table of
# deploy/local/tables.json (tests/demo_publication_test.go checks the two agree). The
# stack creates the publication because the replication role, which owns no
# table, may not; it then hands the publication to that role, so that the
# reader may record its snapshot epoch on it (a comment, owner only).
PUB_TABLES="documents, invoices, document_moves, legacy_notes"

# pg_bootstrap_sql prints the per-shard SQL that follows the schema files:
# this shard's identity, the replication role's grants and the publication.
pg_bootstrap_sql() {
	local i=$1
	cat <<EOF
BEGIN;
DELETE FROM tributary.shard_config WHERE (shard_id, shard_count) IS DISTINCT FROM ($i, $SHARDS);
INSERT INTO tributary.shard_config (shard_id, shard_count)
    SELECT $i, $SHARDS WHERE NOT EXISTS (SELECT 1 FROM tributary.shard_config);
COMMIT;

-- Least privilege: replication, and reading only what is replicated (for
-- the initial snapshot) and the shard's identity.
GRANT CONNECT ON DATABASE app TO tributary_repl;
GRANT USAGE ON SCHEMA public TO tributary_repl;
GRANT SELECT ON $PUB_TABLES TO tributary_repl;
GRANT USAGE ON SCHEMA tributary TO tributary_repl;
GRANT SELECT ON ALL TABLES IN SCHEMA tributary TO tributary_repl;
ALTER DEFAULT PRIVILEGES IN SCHEMA tributary GRANT SELECT ON TABLES TO tributary_repl;

DO \$\$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'tributary_pub') THEN
        CREATE PUBLICATION tributary_pub FOR TABLE $PUB_TABLES;
    ELSE
        -- A stack made before a table was added: the replication role may
        -- not alter a publication it does not own.
        ALTER PUBLICATION tributary_pub SET TABLE $PUB_TABLES;
    END IF;
END
\$\$;
-- The reader records its snapshot epoch as a comment on the publication
-- (schema/envelope.md, "Epochs"), which only the owner may write. Owning
-- a publication grants nothing on tables: changing its table list still
-- takes owning the tables, which this role does not.
ALTER PUBLICATION tributary_pub OWNER TO tributary_repl;
EOF
}

# pg_setup_intact checks, in one query, that what pg_setup makes is still
# there (a test may have dropped the publication, say).
pg_setup_intact() {
	local i=$1
	[[ $(psql_super "$i" app -At -c "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'tributary_pub'
			AND pubowner = (SELECT oid FROM pg_roles WHERE rolname = 'tributary_repl'))
		AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tributary_repl')
		AND EXISTS (SELECT 1 FROM tributary.shard_config WHERE shard_id = $i AND shard_count = $SHARDS)" 2>/dev/null) == t ]]
}

# pg_setup creates database, role, schema and publication on a running
# shard. It runs again only when its inputs changed (schema files, shard
# count, password; recorded in a stamp file) or its result is gone, so that a
# warm `up` does no DDL under tests that are running (DDL would send readers
# new Relation messages and take locks). The schema files must be
# idempotent: a changed file re-applies all of them.
pg_setup() {
	local i=$1 stamp stamp_file files=()
	stamp_file=$PG_ROOT/shard$i.applied
	shopt -s nullglob
	files=("$SCHEMA_DIR"/*.sql)
	shopt -u nullglob
	((${#files[@]} > 0)) || die "no schema files in $SCHEMA_DIR"
	stamp=$({
		cat "${files[@]}"
		pg_bootstrap_sql "$i"
		cat "$PASSWORD_FILE"
	} | sha256sum | cut -d' ' -f1)
	if [[ -f $stamp_file && $(cat "$stamp_file") == "$stamp" ]] && pg_setup_intact "$i"; then
		return
	fi

	if [[ -z $(psql_super "$i" postgres -At -c "SELECT 1 FROM pg_database WHERE datname = 'app'") ]]; then
		psql_super "$i" postgres -c "CREATE DATABASE app"
	fi
	# The password goes through stdin, never argv.
	psql_super "$i" postgres <<EOF
DO \$\$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tributary_repl') THEN
        CREATE ROLE tributary_repl;
    END IF;
END
\$\$;
ALTER ROLE tributary_repl WITH LOGIN REPLICATION NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS
    PASSWORD '$(cat "$PASSWORD_FILE")';
EOF
	local f
	for f in "${files[@]}"; do
		psql_super "$i" app -f "$f" >/dev/null 2>"$PG_ROOT/shard$i.schema.err" ||
			die "shard $i: applying $f failed: $(cat "$PG_ROOT/shard$i.schema.err")"
	done
	rm -f "$PG_ROOT/shard$i.schema.err"
	pg_bootstrap_sql "$i" | psql_super "$i" app ||
		die "shard $i: bootstrap SQL (shard_config, grants, publication) failed"
	printf '%s\n' "$stamp" >"$stamp_file"
}

# pg_initdb makes a new data directory $1 (logging to $2) with initdb.
# initdb writes PG_VERSION early; our marker (.initialized) says it finished.
pg_initdb() {
	local dir=$1 initlog=$2
	rm -rf "$dir"
	as_postgres "$PG_BIN/initdb" -D "$dir" -U postgres -A trust -E UTF8 --locale=C \
		--no-sync >"$initlog" 2>&1 || return 1
	as_postgres touch "$dir/.initialized"
}

# PG_CLONE (TRIBUTARY_PG_CLONE=1): a new shard is a copy of one initdb's
# data directory (pg_template_dir, made once per home, never started), not an
# initdb of its own. initdb is most of a new shard's cost (about 8 s a
# shard at load 50-90 here, against a copy's fraction of a second), so a
# fleet of many shards comes up several times sooner. The copies share a
# PostgreSQL system identifier, as physical clones of one database do:
# the reader keys its state by system identifier, database and slot
# (docs/design/reader.md), and every shard has its own slot, so nothing mixes.
# Off by default: tests that run readers of several shards under one slot
# name need the shards to be separate clusters.
PG_CLONE=${TRIBUTARY_PG_CLONE:-0}
[[ $PG_CLONE == 0 || $PG_CLONE == 1 ]] || {
	echo "stack.sh: TRIBUTARY_PG_CLONE must be 0 or 1, got '$PG_CLONE'" >&2
	exit 2
}
pg_template_dir() { printf '%s/template' "$PG_ROOT"; }

# pg_template makes the template when a shard still needs a data directory.
# It runs before the shards' parallel jobs, which only copy it.
pg_template() {
	local i dir
	dir=$(pg_template_dir)
	[[ ! -f $dir/.initialized ]] || return 0
	for ((i = 0; i < SHARDS; i++)); do
		[[ -f $(pg_dir "$i")/.initialized ]] || break
	done
	((i < SHARDS)) || return 0
	pg_initdb "$dir" "$PG_ROOT/template.initdb.log" ||
		die "the shards' template: initdb failed (log: $PG_ROOT/template.initdb.log)"
	log "postgres: initialized the shards' template $dir (TRIBUTARY_PG_CLONE=1)"
}

# pg_up brings shard i to running and set up.
pg_up() {
	local i=$1 dir port
	dir=$(pg_dir "$i")
	port=$(pg_port "$i")
	if pg_running "$i"; then
		log "postgres shard $i: running on port $port"
	else
		if [[ ! -f $dir/.initialized ]] && ((PG_CLONE)); then
			# Copied beside, then renamed: a copy cut short leaves no
			# directory with the template's .initialized in it.
			local copy=$PG_ROOT/.copy-shard$i
			rm -rf "$dir" "$copy"
			cp -a "$(pg_template_dir)" "$copy" && mv "$copy" "$dir" ||
				die "shard $i: copying the template $(pg_template_dir) to $dir failed"
			log "postgres shard $i: copied the template to $dir"
		elif [[ ! -f $dir/.initialized ]]; then
			pg_initdb "$dir" "$PG_ROOT/shard$i.initdb.log" ||
				die "shard $i: initdb failed (log: $PG_ROOT/shard$i.initdb.log)"
			log "postgres shard $i: initialized $dir"
		fi
		pg_write_config "$i"
		as_postgres "$PG_BIN/pg_ctl" -D "$dir" -l "$PG_ROOT/shard$i.log" -w -t "$WAIT_TIMEOUT" start >/dev/null 9>&- ||
			die "shard $i: pg_ctl start failed (log: $PG_ROOT/shard$i.log)"
		log "postgres shard $i: started on port $port"
	fi
	pg_setup "$i"
}

pg_up_all() {
	# initdb is CPU-bound: a few at a time use both cores without thrashing.
	local i par=4 jobs=()
	((PG_CLONE == 0)) || pg_template
	for ((i = 0; i < SHARDS; i++)); do
		jobs+=("shard$i:pg_up $i")
		if ((${#jobs[@]} == par)); then
			run_parallel "${jobs[@]}"
			jobs=()
		fi
	done
	((${#jobs[@]} == 0)) || run_parallel "${jobs[@]}"
}

pg_down() {
	local i=$1
	pg_running "$i" || return 0
	as_postgres "$PG_BIN/pg_ctl" -D "$(pg_dir "$i")" -m fast -w -t 60 stop >/dev/null ||
		die "shard $i: pg_ctl stop failed (log: $PG_ROOT/shard$i.log)"
	log "postgres shard $i: stopped"
}

# pg_down_all stops every shard found under $PG_ROOT, also those of an
# earlier, larger stack, all at once (a fast shutdown is mostly waiting).
pg_down_all() {
	local dir jobs=()
	shopt -s nullglob
	for dir in "$PG_ROOT"/shard*/; do
		dir=${dir%/}
		jobs+=("shard${dir##*/shard}:pg_down ${dir##*/shard}")
	done
	shopt -u nullglob
	((${#jobs[@]} == 0)) || run_parallel "${jobs[@]}"
}
