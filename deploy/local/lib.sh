# shellcheck shell=bash
# Shared by install.sh and stack.sh: versions, default locations, and the
# small helpers both use to report progress and fail clearly. Sourced, not run.

# shellcheck disable=SC2034 # the variables here are used by the scripts that source this file

# Apache Kafka broker jars. Keep KAFKA_VERSION in step with deploy/local/kafka/pom.xml.
KAFKA_VERSION=4.4.0
KAFKA_JARS=${TRIBUTARY_KAFKA_JARS:-${XDG_CACHE_HOME:-$HOME/.cache}/tributary/kafka-$KAFKA_VERSION}
# The jar cache is complete only when this manifest exists and every jar it
# lists is present: install.sh writes it last, after the copy succeeded.
KAFKA_JARS_MANIFEST=.complete

# Apache ZooKeeper server jars, for ClickHouse cluster mode (ClickHouse 18.16
# keeps replicated tables' logs in ZooKeeper). Keep ZOOKEEPER_VERSION in step
# with deploy/local/zookeeper/pom.xml. Its cache has the same manifest.
ZOOKEEPER_VERSION=3.9.5
ZOOKEEPER_JARS=${TRIBUTARY_ZOOKEEPER_JARS:-${XDG_CACHE_HOME:-$HOME/.cache}/tributary/zookeeper-$ZOOKEEPER_VERSION}

PG_BIN=/usr/lib/postgresql/15/bin

STACK_T0=${STACK_T0:-$(date +%s.%N)}

# elapsed prints seconds since the script started, for progress lines.
elapsed() {
	awk -v a="$STACK_T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%5.1fs", b - a }'
}

log() { printf '[%s] %s\n' "$(elapsed)" "$*" >&2; }

# die stops with a message that says what failed and, where we know it, what
# to do about it.
die() {
	printf '[%s] ERROR: %s\n' "$(elapsed)" "$*" >&2
	exit 1
}

# jars_complete tells whether a jar cache (the Kafka one unless $2 names
# another main jar) is usable as it is.
jars_complete() {
	local dir=$1 main=${2:-kafka_2.13-$KAFKA_VERSION.jar} jar
	[[ -f $dir/$KAFKA_JARS_MANIFEST ]] || return 1
	while IFS= read -r jar; do
		[[ -z $jar || -s $dir/$jar ]] || return 1
	done <"$dir/$KAFKA_JARS_MANIFEST"
	[[ -s $dir/$main ]]
}
