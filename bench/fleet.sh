#!/usr/bin/env bash
# bench/fleet.sh prints what a fleet of shards costs on this machine: the
# demo's processes of a running local stack (make fleet-verify, or
# deploy/local/stack.sh up + deploy/local/demo.sh) measured at rest and
# under loadgen traffic. docs/deploy.md ("A fleet on one machine") holds
# the results and the commands that made them.
#
#   TRIBUTARY_HOME=<stack home> bench/fleet.sh [--settle S] [--window S] [--rate OPS]
#
# Figures, each over a window of --window seconds (default 30):
#   - the reader process(es): VmRSS summed, VmHWM (peak), CPU (utime+stime
#     from /proc/PID/stat) as % of one core; per shard = RSS / shards;
#   - the loader: VmRSS, CPU, and its watermark records (the loader's
#     tributary_loader_records_total{kind="watermark"}), so that CPU and
#     allocations (go_memstats_mallocs_total) per watermark record follow;
#     at rest the loader handles watermarks only (an idle shard's round
#     follows its heartbeat), so its CPU then is the watermark cost, given
#     also per shard; and the times it lost its consumer group in the
#     window (tributary_loader_partitions_lost_total, group session
#     errors) and the mean round trip of its heartbeats to the group
#     coordinator: a window in which it lost it measured a loader that was
#     not consuming;
#   - PostgreSQL: the proportional set size (PSS, /proc/PID/smaps_rollup:
#     shared memory counted once), process count and CPU of all the shards
#     (the processes alive at the window's start);
#   - the machine's load average at the start of each window.
# "rest" starts --settle seconds (default 30) after the call; "load" runs
# bin/loadgen --rate OPS (default 200) with the demo's mix, starting the
# window 10 s into it.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SETTLE=30 WINDOW=30 RATE=200
while (($#)); do
	case $1 in
	--settle) SETTLE=$2; shift 2 ;;
	--window) WINDOW=$2; shift 2 ;;
	--rate) RATE=$2; shift 2 ;;
	*) echo "usage: TRIBUTARY_HOME=<stack home> bench/fleet.sh [--settle S] [--window S] [--rate OPS]" >&2; exit 2 ;;
	esac
done
[[ -n ${TRIBUTARY_HOME:-} && -f $TRIBUTARY_HOME/stack.env ]] || {
	echo "fleet.sh: TRIBUTARY_HOME must name a running stack (no $TRIBUTARY_HOME/stack.env)" >&2
	exit 2
}
set -a
# shellcheck disable=SC1091
source "$TRIBUTARY_HOME/stack.env"
set +a
DEMO=$TRIBUTARY_HOME/demo
PG_ROOT=$(realpath "$TRIBUTARY_HOME/pg")
LOADER_METRICS=http://127.0.0.1:$((9101 + ${TRIBUTARY_PORT_OFFSET:-0}))/metrics

pids_of() { # pid files -> pids of live processes
	local f
	for f in "$@"; do
		[[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f"
	done
	return 0
}
mapfile -t READERS < <(pids_of "$DEMO"/reader*.pid)
mapfile -t LOADER < <(pids_of "$DEMO/loader.pid")
((${#READERS[@]} > 0 && ${#LOADER[@]} == 1)) || {
	echo "fleet.sh: the demo's readers and loader are not running in $DEMO (deploy/local/demo.sh starts them)" >&2
	exit 1
}
# postgres_pids: every process of every shard (postmasters and children),
# from one ps (a pgrep per postmaster reads all of /proc each time, which
# took minutes for 128 shards on a loaded machine). The readers below use
# bash builtins only, for the same reason: 1,024 processes at 128 shards.
postgres_pids() {
	local f pm
	for f in "$PG_ROOT"/shard*/postmaster.pid; do
		read -r pm <"$f" && echo "$pm"
	done | awk 'NR == FNR {pm[$1] = 1; print; next} $2 in pm {print $1}' - <(ps -eo pid=,ppid=)
}

ticks() { # summed utime+stime of the pids (fields 14 and 15 of /proc/PID/stat)
	local p sum=0 f
	for p in "$@"; do
		read -r -a f 2>/dev/null <"/proc/$p/stat" || continue # quiet: a process may end meanwhile
		sum=$((sum + f[13] + f[14]))
	done
	echo "$sum"
}
field_kb() { # summed field $2 (VmRSS:, Pss:) of /proc/PID/$1, kB
	local file=$1 field=$2 p sum=0 k v
	shift 2
	for p in "$@"; do
		{
			while read -r k v _; do
				[[ $k == "$field" ]] && sum=$((sum + v)) && break
			done <"/proc/$p/$file"
		} 2>/dev/null || true
	done
	echo "$sum"
}
status_kb() { field_kb status "$1:" "${@:2}"; }
pss_kb() { field_kb smaps_rollup Pss: "$@"; }
metric() { # sum of the loader's samples of metric $1 with labels matching $2
	curl -fsS "$LOADER_METRICS" | awk -v m="$1" -v l="$2" '$1 ~ "^"m && $1 ~ l {s += $2} END {printf "%.0f", s}'
}
metric_ms() { # the same sum, in thousandths (a seconds metric in ms), whole
	curl -fsS "$LOADER_METRICS" | awk -v m="$1" -v l="$2" '$1 ~ "^"m && $1 ~ l {s += $2} END {printf "%.0f", 1000*s}'
}
load1() { cut -d' ' -f1 /proc/loadavg; }

SHARDS=$(grep -c '"shard"' "$TRIBUTARY_FLEET")
HZ=$(getconf CLK_TCK)
PG=()

# window NAME: sample for WINDOW seconds and print one line of figures.
window() {
	local name=$1 l r0 l0 p0 r1 l1 p1 w0 w1 m0 m1 g0 g1 e0 e1 hc0 hc1 hs0 hs1 rss hwm lrss pss
	l=$(load1)
	mapfile -t PG < <(postgres_pids)
	r0=$(ticks "${READERS[@]}") l0=$(ticks "${LOADER[@]}") p0=$(ticks "${PG[@]}")
	w0=$(metric tributary_loader_records_total 'kind="watermark"') m0=$(metric go_memstats_mallocs_total '')
	g0=$(metric tributary_loader_partitions_lost_total '') e0=$(metric tributary_loader_group_session_errors_total '')
	hc0=$(metric tributary_loader_group_request_seconds_count 'request="heartbeat"')
	hs0=$(metric_ms tributary_loader_group_request_seconds_sum 'request="heartbeat"')
	sleep "$WINDOW"
	r1=$(ticks "${READERS[@]}") l1=$(ticks "${LOADER[@]}") p1=$(ticks "${PG[@]}")
	w1=$(metric tributary_loader_records_total 'kind="watermark"') m1=$(metric go_memstats_mallocs_total '')
	g1=$(metric tributary_loader_partitions_lost_total '') e1=$(metric tributary_loader_group_session_errors_total '')
	hc1=$(metric tributary_loader_group_request_seconds_count 'request="heartbeat"')
	hs1=$(metric_ms tributary_loader_group_request_seconds_sum 'request="heartbeat"')
	rss=$(status_kb VmRSS "${READERS[@]}") hwm=$(status_kb VmHWM "${READERS[@]}") lrss=$(status_kb VmRSS "${LOADER[@]}")
	pss=$(pss_kb "${PG[@]}")
	awk -v n="$name" -v s="$SHARDS" -v procs="${#READERS[@]}" -v l="$l" -v w="$WINDOW" -v hz="$HZ" \
		-v rt=$((r1 - r0)) -v lt=$((l1 - l0)) -v pt=$((p1 - p0)) -v wm=$((w1 - w0)) -v ma=$((m1 - m0)) \
		-v rss="$rss" -v hwm="$hwm" -v lrss="$lrss" -v pss="$pss" -v pgn="${#PG[@]}" -v gl=$((g1 - g0)) -v ge=$((e1 - e0)) -v hc=$((hc1 - hc0)) -v hs=$((hs1 - hs0)) 'BEGIN {
		printf "%s: shards %d, load %s | readers (%d proc): RSS %.1f MB (%.2f MB/shard), peak %.1f MB, CPU %.1f %% | ", n, s, l, procs, rss/1024, rss/1024/s, hwm/1024, 100*rt/hz/w
		printf "loader: RSS %.1f MB, CPU %.1f %% (%.3f %%/shard), watermarks %.0f/s", lrss/1024, 100*lt/hz/w, 100*lt/hz/w/s, wm/w
		if (wm > 0) printf " (%.3f CPU-ms, %.0f allocs each)", 1000*lt/hz/wm, ma/wm
		printf ", group lost %d, session errors %d, heartbeats %d", gl, ge, hc
		if (hc > 0) printf " (%.0f ms each)", hs/hc
		printf " | postgres: %d processes, PSS %.0f MB (%.1f MB/shard), CPU %.1f %%\n", pgn, pss/1024, pss/1024/s, 100*pt/hz/w
	}'
}

sleep "$SETTLE"
window rest
ring_args=()
ring=$(TRIBUTARY_HOME=$TRIBUTARY_HOME "$REPO/deploy/local/demo.sh" ring-map)
[[ -z $ring ]] || ring_args=(--ring-map "$ring")
"$REPO/bin/loadgen" --rate "$RATE" --duration "$((WINDOW + 15))s" --move-percent 2 --half-done-percent 10 --legacy-percent 3 \
	"${ring_args[@]}" >"$DEMO/fleet-bench-loadgen.out" 2>&1 &
gen=$!
sleep 10
window load
wait "$gen" || { echo "fleet.sh: loadgen failed; see $DEMO/fleet-bench-loadgen.out" >&2; exit 1; }
grep '^loadgen: [0-9]* ops' "$DEMO/fleet-bench-loadgen.out" || true
