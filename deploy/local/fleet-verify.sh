#!/usr/bin/env bash
# make fleet-verify: a fleet of many shards on one machine, checked end to
# end (docs/deploy.md, "A fleet on one machine"). On its own stack
# (FLEET_HOME, ports at FLEET_PORT_OFFSET): FLEET_SHARDS PostgreSQL shards
# on Apache Kafka, the demo's processes (one cdc-reader process serving
# every shard, a loader, the API) and its traffic, then make verify. Each
# step is timed, with the machine's load at its start, so that a slow run
# says where its minutes went:
#
#   fleet-verify: 32 shards passed in 219 s: purge 0 s, stack 94 s, demo 30 s, verify 95 s (load at the steps' starts: 29.84, 29.84, 29.97, 38.20; at the end 63.09)
#
# Exit status 0 only when every step passed; otherwise 1, after a line
# "fleet-verify: FAILED in <step> ..." on stderr (make verify's own report
# above it says what differed).
#
#   FLEET_SHARDS       shards (default 32)
#   FLEET_HOME         the stack's home (default <repo>/.stack-fleet)
#   FLEET_PORT_OFFSET  its port offset (default 200)
#   FLEET_FRESH=1      purge the home first: a cold start, as on a fresh machine
#   FLEET_DOWN=1       stop the demo and the stack at the end, passed or not
#                      (default: they stay up for a look; make fleet-down stops them)
#
# The stack is made with TRIBUTARY_PG_CLONE=1 (stack.d/postgres.sh: the
# shards are copies of one initdb) and waits up to TRIBUTARY_WAIT_TIMEOUT
# (default here 300 s) for each service, with a Kafka node fenced by its
# controller only after 30 s without a heartbeat
# (TRIBUTARY_KAFKA_BROKER_SESSION_MS; the stack's default, 3 s, lets a
# loaded machine's stalls fence the broker and expel the loader from its
# group); make verify waits up to
# TRIBUTARY_VERIFY_WAIT (default here 5m) for the API to reach the shards'
# WAL positions. Both are bounds, not pauses: on a loaded machine a JVM
# start or 32 initial copies take minutes, and a bound met only on an idle
# machine makes the check fail for the machine's sake, not the product's.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SHARDS=${FLEET_SHARDS:-32}
export TRIBUTARY_HOME=${FLEET_HOME:-$REPO/.stack-fleet}
export TRIBUTARY_PORT_OFFSET=${FLEET_PORT_OFFSET:-200}
FRESH=${FLEET_FRESH:-0}
DOWN=${FLEET_DOWN:-0}
for v in FRESH DOWN; do
	[[ ${!v} == 0 || ${!v} == 1 ]] || {
		echo "fleet-verify: FLEET_$v must be 0 or 1, got '${!v}'" >&2
		exit 2
	}
done

t0=$SECONDS
times=() loads=()
load1() { cut -d' ' -f1 /proc/loadavg; }

stop_stack() {
	"$HERE/demo.sh" stop || true
	"$HERE/stack.sh" down || true
}

# step NAME CMD...: runs CMD, records its time and the load at its start;
# a failure ends the run with exit status 1.
step() {
	local name=$1 start=$SECONDS rc=0
	shift
	loads+=("$(load1)")
	echo "fleet-verify: $name (load ${loads[-1]})"
	"$@" || rc=$?
	times+=("$name $((SECONDS - start)) s")
	if ((rc != 0)); then
		echo "fleet-verify: FAILED in $name (exit $rc) after $((SECONDS - t0)) s: $(summary)" >&2
		((DOWN == 0)) || stop_stack
		exit 1
	fi
}

# summary: "stack 190 s, demo 52 s, verify 59 s (load at the steps' starts: ...)".
summary() {
	local IFS=,
	printf '%s (load at the steps'"'"' starts: %s; at the end %s)' "${times[*]}" "${loads[*]}" "$(load1)" | sed 's/,/, /g'
}

if ((FRESH)); then
	step purge bash -c '"$1/demo.sh" stop && "$1/stack.sh" down --purge' _ "$HERE"
fi
step stack env TRIBUTARY_SHARDS="$SHARDS" TRIBUTARY_KAFKA=real TRIBUTARY_PG_CLONE=1 \
	TRIBUTARY_WAIT_TIMEOUT="${TRIBUTARY_WAIT_TIMEOUT:-300}" \
	TRIBUTARY_KAFKA_BROKER_SESSION_MS="${TRIBUTARY_KAFKA_BROKER_SESSION_MS:-30000}" "$HERE/stack.sh" up
step demo env TRIBUTARY_DEMO_READERS=one "$HERE/demo.sh"
step verify env TRIBUTARY_VERIFY_WAIT="${TRIBUTARY_VERIFY_WAIT:-5m}" \
	make -C "$REPO" --no-print-directory verify TRIBUTARY_HOME="$TRIBUTARY_HOME"
echo "fleet-verify: $SHARDS shards passed in $((SECONDS - t0)) s: $(summary)"
((DOWN == 0)) || stop_stack
