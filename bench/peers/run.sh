#!/usr/bin/env bash
# bench/peers/run.sh [flags of `bench peers`, e.g. --rows N --cases a,b --latency-rates 1000,5000 --json out.json]
# bench/peers/run.sh --help     (every flag)
#
# Tributary's reader and Debezium's PostgreSQL connector on the same shard,
# workload and Kafka (the local stack's, from .stack/stack.env): builds what
# is missing or stale (cmd/cdc-reader, the bench command, the Debezium jar with Maven),
# then runs the comparison (throughput, CPU, peak RSS; commit → Kafka
# latency) under /tmp/tributary-bench.lock so that no other benchmark runs at
# the same time (do not wrap it in flock yourself: it would wait for itself).
# Method and results: docs/peers.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if [[ -z "${TRIBUTARY_SHARD_0_DSN:-}" ]]; then
	set -a; . "${TRIBUTARY_HOME:-$root/.stack}/stack.env"; set +a
fi
bin=${PEERS_BIN:-${TMPDIR:-/tmp}/tributary-peers-bin}
mkdir -p "$bin"
go build -o "$bin/cdc-reader" ./cmd/cdc-reader
go build -o "$bin/bench" ./bench
for a in "$@"; do
	case $a in -h | -help | --help) exec "$bin/bench" peers --help ;; esac
done
jar=bench/peers/debezium/target/peers-debezium.jar
if [[ ! -f $jar || -n $(find bench/peers/debezium/pom.xml bench/peers/debezium/src -newer "$jar" -print -quit) ]]; then
	echo "building $jar (Maven; dependencies cached in ~/.m2)"
	(cd bench/peers/debezium && mvn -q package)
fi
lock=/tmp/tributary-bench.lock
if ! flock -n "$lock" true; then
	echo "waiting for $lock (another benchmark is running)"
fi
exec flock "$lock" "$bin/bench" peers --cdc-reader "$bin/cdc-reader" --jar "$jar" "$@"
