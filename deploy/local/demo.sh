#!/usr/bin/env bash
# The demo: the cdc-readers, a loader and the API, started in the
# background against the local stack (deploy/local/stack.sh up must have run),
# then demo traffic for a while, then a tour of what to look at.
#
#   deploy/local/demo.sh          start (idempotent) + traffic + tour
#   deploy/local/demo.sh stop     stop the demo processes (the stack stays up)
#   deploy/local/demo.sh ring-map print the ring map the demo places workspaces
#                                 by, if the fleet is the published map's
#
# The shards are those of the fleet file ($TRIBUTARY_FLEET, which stack.env
# names: the stack's $TRIBUTARY_HOME/fleet.json), whatever their numbers.
# TRIBUTARY_DEMO_READERS chooses how they are read: "per-shard" (one
# cdc-reader process per shard, --fleet and --shard) or "one" (one process,
# --fleet --shards all, each shard retried alone on failure). The default is
# per-shard up to 4 shards, one above (32 processes cost about 32 times the
# RSS of one: docs/design/reader.md, "Many shards in one process").
#
# Logs and pid files: $TRIBUTARY_HOME/demo/.
#
# TRIBUTARY_SECURE=1: TLS and authentication on every hop. The readers
# and loadgen connect to the shards with sslmode=verify-full against the
# stack's CA; readers and loader reach Kafka through its SASL_SSL listener
# (SCRAM-SHA-512); the loader writes to ClickHouse's TLS port as the
# loader user and the API reads as the read-only reader user (passwords
# from the stack's files, never argv). The API serves HTTPS with the stack's certificate
# ($TRIBUTARY_HOME/tls) and requires bearer tokens ($TRIBUTARY_HOME/demo/tokens,
# made once: admin, support = documents:read, finance = revenue:read and
# rows:read:invoices); the tour's curl commands carry --cacert and a token, and
# $TRIBUTARY_HOME/demo/api.env gives make verify the URL, CA and token, and
# the TLS settings it reaches ClickHouse and the shards with.
# Without it, api.env still gives the API's URL (its port follows the offset).
#
# Ports: the API on 8080, the loader's metrics on 9101 and reader i's on
# 9110+i (the one reader process's: 9110), each plus $TRIBUTARY_PORT_OFFSET (stack.env carries the stack's),
# so that demos of stacks at different offsets run side by side.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TRIBUTARY_HOME=$(realpath -m "${TRIBUTARY_HOME:-$REPO/.stack}")
DEMO=$TRIBUTARY_HOME/demo
BIN=$REPO/bin
TRAFFIC=${TRIBUTARY_DEMO_TRAFFIC:-20s}
RATE=${TRIBUTARY_DEMO_RATE:-200}

die() { echo "demo: $*" >&2; exit 1; }

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_all() {
	[[ -d $DEMO ]] || return 0
	for pidf in "$DEMO"/*.pid; do
		[[ -e $pidf ]] || continue
		if alive "$pidf"; then
			kill -TERM "$(cat "$pidf")" 2>/dev/null || true
		fi
	done
	# Graceful shutdown flushes Kafka and reports the slot position: give it time.
	for _ in $(seq 1 100); do
		local any=0
		for pidf in "$DEMO"/*.pid; do
			[[ -e $pidf ]] && alive "$pidf" && any=1
		done
		((any)) || break
		sleep 0.1
	done
	rm -f "$DEMO"/*.pid
	echo "demo: processes stopped"
}

# fleet_shards prints the shard numbers of the fleet file $1, one a line.
# The binaries check the file itself (docs/configuration.md "Fleet file"); this only reads
# the numbers.
fleet_shards() {
	grep -oE '"shard"[[:space:]]*:[[:space:]]*[0-9]+' "$1" | grep -oE '[0-9]+$'
}

# ring_map prints the published ring map (deploy/local/ringmap.json,
# version 1: shards 0..3 x 64 virtual nodes) when the fleet is those
# shards, else nothing: loadgen then generates the equivalent map of the
# fleet's shards, and the loader runs without ownership checks.
ring_map() {
	[[ $(fleet_shards "$1" | sort -n | paste -sd' ') == "0 1 2 3" ]] && echo "$REPO/deploy/local/ringmap.json"
	return 0
}

if [[ ${1:-} == stop ]]; then
	stop_all
	exit 0
fi

[[ -f $TRIBUTARY_HOME/stack.env ]] || die "no stack: run 'make demo' (or deploy/local/stack.sh up) first"
fleet_given=${TRIBUTARY_FLEET:-} # a fleet file given wins over the stack's
set -a
# shellcheck disable=SC1091
source "$TRIBUTARY_HOME/stack.env"
set +a
TRIBUTARY_FLEET=${fleet_given:-${TRIBUTARY_FLEET:-}}
# TRIBUTARY_SECURE=1 (see the top): every Kafka client (readers, loader)
# uses the stack's SASL_SSL listener, which `TRIBUTARY_SECURE=1
# deploy/local/stack.sh up` gives Apache Kafka; every shard DSN of the
# stack's asks for verify-full TLS; ClickHouse is dialled on its TLS port.
CH_LOADER_ENV=()
CH_API_ENV=()
if [[ ${TRIBUTARY_SECURE:-0} == 1 ]]; then
	[[ -n ${TRIBUTARY_KAFKA_SASL_SSL_BROKERS:-} ]] ||
		die "TRIBUTARY_SECURE=1, but the stack's Kafka has no SASL_SSL listener: run 'deploy/local/stack.sh down', then 'TRIBUTARY_SECURE=1 TRIBUTARY_KAFKA=real deploy/local/stack.sh up'"
	[[ -n ${TRIBUTARY_CLICKHOUSE_TLS_ADDR:-} && -n ${TRIBUTARY_CLICKHOUSE_LOADER_PASSWORD_FILE:-} ]] ||
		die "TRIBUTARY_SECURE=1, but stack.env has no ClickHouse TLS port or users: restart the stack (deploy/local/stack.sh down; up)"
	export TRIBUTARY_KAFKA_BROKERS=$TRIBUTARY_KAFKA_SASL_SSL_BROKERS TRIBUTARY_KAFKA_CA_FILE=$TRIBUTARY_STACK_CA_FILE \
		TRIBUTARY_KAFKA_SASL_USER=$TRIBUTARY_KAFKA_SASL_SSL_USER TRIBUTARY_KAFKA_SASL_PASSWORD_FILE=$TRIBUTARY_KAFKA_SASL_SSL_PASSWORD_FILE
	TRIBUTARY_KAFKA_KIND="$TRIBUTARY_KAFKA_KIND, SASL_SSL on $TRIBUTARY_KAFKA_BROKERS"
	# The stack's shard DSNs (stack.env) say sslmode=disable: ask for TLS
	# verified against the stack's CA instead. A fleet file of your own
	# names DSNs that say what they need.
	for v in $(compgen -v | grep -E '^TRIBUTARY_SHARD_[0-9]+_(REPL_)?DSN$'); do
		export "$v=${!v/sslmode=disable/sslmode=verify-full\&sslrootcert=$TRIBUTARY_STACK_CA_FILE}"
	done
	export TRIBUTARY_CLICKHOUSE_ADDR=$TRIBUTARY_CLICKHOUSE_TLS_ADDR TRIBUTARY_CLICKHOUSE_CA_FILE=$TRIBUTARY_STACK_CA_FILE
	CH_LOADER_ENV=(TRIBUTARY_CLICKHOUSE_USER="$TRIBUTARY_CLICKHOUSE_LOADER_USER"
		TRIBUTARY_CLICKHOUSE_PASSWORD_FILE="$TRIBUTARY_CLICKHOUSE_LOADER_PASSWORD_FILE")
	CH_API_ENV=(TRIBUTARY_CLICKHOUSE_USER="$TRIBUTARY_CLICKHOUSE_READER_USER"
		TRIBUTARY_CLICKHOUSE_PASSWORD_FILE="$TRIBUTARY_CLICKHOUSE_READER_PASSWORD_FILE")
fi
PORT_OFFSET=${TRIBUTARY_PORT_OFFSET:-0}
[[ $PORT_OFFSET =~ ^[0-9]+$ ]] || die "TRIBUTARY_PORT_OFFSET='$PORT_OFFSET' is not a number"
API_ADDR=${TRIBUTARY_API_LISTEN:-127.0.0.1:$((8080 + PORT_OFFSET))}
LOADER_METRICS=127.0.0.1:$((9101 + PORT_OFFSET))
READER_METRICS_BASE=$((9110 + PORT_OFFSET))
[[ -n ${TRIBUTARY_FLEET:-} && -f $TRIBUTARY_FLEET ]] ||
	die "no fleet file (\$TRIBUTARY_FLEET='${TRIBUTARY_FLEET:-}'): run deploy/local/stack.sh up, which writes $TRIBUTARY_HOME/fleet.json"
mapfile -t SHARD_NUMBERS < <(fleet_shards "$TRIBUTARY_FLEET")
((${#SHARD_NUMBERS[@]} > 0)) || die "$TRIBUTARY_FLEET lists no shards"
RING_MAP=$(ring_map "$TRIBUTARY_FLEET")

if [[ ${1:-} == ring-map ]]; then
	[[ -z $RING_MAP ]] || echo "$RING_MAP"
	exit 0
fi

for b in cdc-reader loader api loadgen preflight; do
	[[ -x $BIN/$b ]] || die "missing $BIN/$b: run 'make build'"
done
mkdir -p "$DEMO"
export TRIBUTARY_TABLES=$REPO/deploy/local/tables.json

# start NAME CMD...: run in the background unless already running.
start() {
	local name=$1
	shift
	if alive "$DEMO/$name.pid"; then
		echo "demo: $name already running (pid $(cat "$DEMO/$name.pid"))"
		return
	fi
	"$@" >>"$DEMO/$name.log" 2>&1 &
	echo $! >"$DEMO/$name.pid"
	echo "demo: started $name (pid $!, log $DEMO/$name.log)"
}

# The check before the first start: the table config against every shard,
# as the readers will connect (docs/configuration.md "Before the first start").
"$BIN/preflight" --tables "$TRIBUTARY_TABLES" --fleet "$TRIBUTARY_FLEET" ||
	die "preflight found the problems above; fix them (or the table config) first"

READERS=${TRIBUTARY_DEMO_READERS:-$( ((${#SHARD_NUMBERS[@]} > 4)) && echo one || echo per-shard)}
reader_metrics=()
case $READERS in
per-shard)
	for i in "${SHARD_NUMBERS[@]}"; do
		# The reader finds its DSN (with its password) through the fleet file,
		# which names the stack.env variable holding it: never argv.
		# ClickHouse ($TRIBUTARY_CLICKHOUSE_ADDR) as the API's read-only user:
		# the sweep that ends a resnapshot with --where only reads it.
		TRIBUTARY_PG_DSN='' start "reader-$i" env "${CH_API_ENV[@]}" "$BIN/cdc-reader" --fleet "$TRIBUTARY_FLEET" --shard "$i" \
			--metrics-addr "127.0.0.1:$((READER_METRICS_BASE + i))"
		reader_metrics+=("http://127.0.0.1:$((READER_METRICS_BASE + i))/metrics")
	done
	;;
one)
	TRIBUTARY_PG_DSN='' start readers env "${CH_API_ENV[@]}" "$BIN/cdc-reader" --fleet "$TRIBUTARY_FLEET" --shards all \
		--metrics-addr "127.0.0.1:$READER_METRICS_BASE"
	reader_metrics+=("http://127.0.0.1:$READER_METRICS_BASE/metrics")
	;;
*) die "TRIBUTARY_DEMO_READERS must be per-shard or one, got '$READERS'" ;;
esac
# Workspaces are placed by the published ring map when the fleet is its
# shards (ring_map above); the loader checks every row against the same
# map (tributary_misplaced_rows).
ring_args=()
if [[ -n $RING_MAP ]]; then
	ring_args=(--ring-map "$RING_MAP")
fi
start loader env "${CH_LOADER_ENV[@]}" "$BIN/loader" --metrics-addr "$LOADER_METRICS" --revenue-aggregate-interval 1s "${ring_args[@]}"
# The status page (GET /) reads the readers' and the loader's metrics.
component_metrics=http://$LOADER_METRICS/metrics
for u in "${reader_metrics[@]}"; do
	component_metrics+=",$u"
done
# TRIBUTARY_SECURE=1: HTTPS and tokens on the API (see the top). API_URL and
# CURL are how everything below reaches it; TOUR_CURL is how the tour says so.
API_URL=http://$API_ADDR
CURL=(curl)
TOUR_CURL="curl -s"
api_secure=()
TOKEN_LINE=
# make verify reads the API's URL from api.env (the port follows the offset).
echo "TRIBUTARY_API_URL=$API_URL" >"$DEMO/api.env"
if [[ ${TRIBUTARY_SECURE:-0} == 1 ]]; then
	tokens=$DEMO/tokens
	if [[ ! -s $tokens ]]; then
		(
			umask 077
			printf 'admin:%s:admin\nsupport:%s:documents:read\nfinance:%s:revenue:read,rows:read:invoices\n' \
				"$(openssl rand -hex 24)" "$(openssl rand -hex 24)" "$(openssl rand -hex 24)" >"$tokens"
		)
	fi
	api_secure=(--tls-cert-file "$TRIBUTARY_HOME/tls/server.crt" --tls-key-file "$TRIBUTARY_HOME/tls/server.key"
		--tokens-file "$tokens" --require-auth)
	API_URL=https://$API_ADDR
	# The token goes in a header file, not on curl's command line (ps shows it).
	(
		umask 077
		echo "Authorization: Bearer $(awk -F: '$1 == "admin" {print $2}' "$tokens")" >"$DEMO/admin.header"
		printf 'TRIBUTARY_API_URL=%s\nTRIBUTARY_API_CA_FILE=%s\nTRIBUTARY_API_TOKEN=%s\n' "$API_URL" "$TRIBUTARY_STACK_CA_FILE" \
			"$(awk -F: '$1 == "admin" {print $2}' "$tokens")" >"$DEMO/api.env"
		# make verify, as the API: ClickHouse's TLS port as the read-only
		# user, and the shards over verify-full TLS.
		printf 'TRIBUTARY_CLICKHOUSE_ADDR=%s\nTRIBUTARY_CLICKHOUSE_CA_FILE=%s\n' "$TRIBUTARY_CLICKHOUSE_ADDR" "$TRIBUTARY_CLICKHOUSE_CA_FILE" >>"$DEMO/api.env"
		printf '%s\n' "${CH_API_ENV[@]}" >>"$DEMO/api.env"
		for v in $(compgen -v | grep -E '^TRIBUTARY_SHARD_[0-9]+_DSN$'); do
			printf "%s='%s'\n" "$v" "${!v}" >>"$DEMO/api.env"
		done
	)
	CURL=(curl --cacert "$TRIBUTARY_STACK_CA_FILE" -H "@$DEMO/admin.header")
	TOUR_CURL="curl -s --cacert $TRIBUTARY_STACK_CA_FILE -H @$DEMO/admin.header"
	TOKEN_LINE=$'\n'"  The API serves HTTPS (the stack's CA: $TRIBUTARY_STACK_CA_FILE) and wants a bearer token:"
	TOKEN_LINE+=$'\n'"    $DEMO/admin.header is 'Authorization: Bearer <the admin token>'; $DEMO/tokens also has support and finance"
fi
start api env "${CH_API_ENV[@]}" "$BIN/api" --listen "$API_ADDR" --fleet "$TRIBUTARY_FLEET" --component-metrics "$component_metrics" "${api_secure[@]}"

echo -n "demo: waiting for the API"
for _ in $(seq 1 100); do
	if "${CURL[@]}" -fsS "$API_URL/readyz" >/dev/null 2>&1; then
		echo " - ready"
		break
	fi
	for pidf in "$DEMO"/*.pid; do
		alive "$pidf" || die "$(basename "$pidf" .pid) exited; see $DEMO/$(basename "$pidf" .pid).log"
	done
	echo -n .
	sleep 0.2
done
"${CURL[@]}" -fsS "$API_URL/readyz" >/dev/null || die "API not ready after 20 s; see $DEMO/api.log"

echo "demo: running traffic for $TRAFFIC at $RATE ops/s"
"$BIN/loadgen" --rate "$RATE" --duration "$TRAFFIC" --move-percent 2 --half-done-percent 10 --legacy-percent 3 "${ring_args[@]}" | tee "$DEMO/loadgen.out"

for pidf in "$DEMO"/*.pid; do
	alive "$pidf" || die "$(basename "$pidf" .pid) exited during traffic; see $DEMO/$(basename "$pidf" .pid).log"
done

# A document id the traffic created, for the tour.
id=$(grep -m1 -oP 'sample: documents id \K[0-9]+' "$DEMO/loadgen.out" || true)
if [[ -z $id ]]; then
	first_dsn=TRIBUTARY_SHARD_${SHARD_NUMBERS[0]}_DSN # the stack's variables (stack.env)
	id=$(psql -X -At "${!first_dsn:-}" -c "SELECT id FROM documents ORDER BY id DESC LIMIT 1" 2>/dev/null || true)
fi
# Let the sample's write arrive before the tour looks it up: a
# read-your-writes request waits (up to 30 s) for its shard's watermark to
# pass the commit (docs/api.md "Read-your-writes"); otherwise a pause.
if after=$(grep -m1 -oP 'sample: documents id [0-9]+ on shard \K[0-9]+, WAL after commit [0-9A-F]+/[0-9A-F]+' "$DEMO/loadgen.out"); then
	"${CURL[@]}" -sS -o /dev/null "$API_URL/v1/documents/$id?after=${after%%,*}:${after##* }&wait=30s" ||
		echo "demo: the API did not answer for the sample document $id (see $DEMO/api.log)" >&2
else
	sleep 2
fi

cat <<EOF

──────────────────────────────── Tributary tour ────────────────────────────────
The stack (${#SHARD_NUMBERS[@]} PostgreSQL shards, numbered ${SHARD_NUMBERS[*]} in $TRIBUTARY_FLEET;
Kafka: $TRIBUTARY_KAFKA_KIND; ClickHouse) is up, the cdc-readers ($READERS: ${#reader_metrics[@]} process(es)), a loader and the API are running.$TOKEN_LINE

  The status page (freshness, readers, loader, anomalies, revenue), in a browser:
    $API_URL/
  Per-shard freshness (watermark LSN and commit time):
    $TOUR_CURL $API_URL/v1/shards
  A document by global id, from any shard, with the shard it lives on:
    $TOUR_CURL $API_URL/v1/documents/${id:-<id>}
  Any replicated table by id:
    $TOUR_CURL $API_URL/v1/tables/invoices/rows/<id>
  Metrics:
    $TOUR_CURL $API_URL/metrics | grep tributary_api
    curl -s http://$LOADER_METRICS/metrics | grep tributary_loader      # loader
    curl -s ${reader_metrics[0]} | grep 'tributary_reader.*shard="${SHARD_NUMBERS[0]}"'      # reader of shard ${SHARD_NUMBERS[0]}
  Check the API against the shards (scatter-gather ground truth):
    make verify
  Revenue across every workspace, by day and currency (CSV: add &format=csv):
    $TOUR_CURL '$API_URL/v1/revenue?from=$(date -u +%Y-%m-01)&to=$(date -u -d tomorrow +%Y-%m-%d)&group_by=day,currency'
  More traffic:
    set -a; . $TRIBUTARY_HOME/stack.env; set +a; bin/loadgen --rate 500 --duration 30s
  Logs: $DEMO/*.log      Stop: make down   (make purge also deletes the data)
EOF
if [[ -n $id ]]; then
	echo
	echo "\$ $TOUR_CURL $API_URL/v1/documents/$id"
	# Read whole, then cut: piping into head ends curl with EPIPE (exit 23)
	# once the answer is longer, and pipefail then fails the whole demo.
	doc=$("${CURL[@]}" -s "$API_URL/v1/documents/$id" || true)
	printf '%s' "${doc:0:1500}"
	((${#doc} <= 1500)) || printf ' ...'
	echo
fi
echo "\$ $TOUR_CURL $API_URL/v1/shards"
"${CURL[@]}" -s "$API_URL/v1/shards"
