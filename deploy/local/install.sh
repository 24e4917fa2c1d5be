#!/usr/bin/env bash
# Installs what the local stack (deploy/local/stack.sh) needs on a Debian
# bookworm machine, as root. Idempotent: what is present is left alone, so a
# second run only checks.
#
#   - Debian packages: PostgreSQL 15, ClickHouse, kcat, Prometheus, and Java
#     and Maven when missing;
#   - the Apache Kafka broker jars from Maven Central, copied by Maven (from
#     deploy/local/kafka/pom.xml) into a cache directory
#     (default ~/.cache/tributary/kafka-<version>; env TRIBUTARY_KAFKA_JARS);
#   - the Apache ZooKeeper server jars likewise (deploy/local/zookeeper/pom.xml;
#     default ~/.cache/tributary/zookeeper-<version>; env
#     TRIBUTARY_ZOOKEEPER_JARS), for ClickHouse cluster mode;
#   - chDB (PyPI chdb-core: current ClickHouse, in-process) in a Python venv
#     (default ~/.cache/tributary/chdb-venv; env TRIBUTARY_CHDB_VENV), for
#     the current-ClickHouse compatibility test (tests/chdb_compat_test.go).
#
# Go is not installed here: Debian's is too old for go.mod; the machine image
# provides a current one.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=deploy/local/lib.sh
source "$HERE/lib.sh"

usage() {
	cat <<EOF
usage: deploy/local/install.sh

Installs the local stack's prerequisites on Debian bookworm (run as root):
apt packages (only those missing), the Kafka $KAFKA_VERSION broker jars into
$KAFKA_JARS and the ZooKeeper $ZOOKEEPER_VERSION jars into $ZOOKEEPER_JARS
(each skipped when already complete).

Environment:
  TRIBUTARY_KAFKA_JARS  jar cache directory (default ~/.cache/tributary/kafka-$KAFKA_VERSION)
  TRIBUTARY_ZOOKEEPER_JARS
                        ZooKeeper jar cache (default ~/.cache/tributary/zookeeper-$ZOOKEEPER_VERSION)
  TRIBUTARY_CHDB_VENV   chDB $CHDB_VERSION venv (default ~/.cache/tributary/chdb-venv; ~530 MB)
EOF
}

# pkg_installed tells whether dpkg has the package fully installed.
pkg_installed() {
	[[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]
}

# install_packages installs, in one apt run, the packages that are missing.
install_packages() {
	# chromium: headless, for the status page test (tests/status_page_test.go).
	local want=(postgresql-15 postgresql-client-15 clickhouse-server clickhouse-client kcat prometheus chromium)
	# Java 17 and Maven normally come with the machine; install them only
	# when the commands are missing, so a newer JDK set up by hand is kept.
	command -v java >/dev/null || want+=(default-jre-headless)
	command -v mvn >/dev/null || want+=(maven)
	# systemd-analyze checks the units in deploy/systemd (tests/deploy_units_test.go).
	command -v systemd-analyze >/dev/null || want+=(systemd)

	local missing=() p
	for p in "${want[@]}"; do
		pkg_installed "$p" || missing+=("$p")
	done
	if ((${#missing[@]} == 0)); then
		log "apt: all packages present (${want[*]})"
		return
	fi
	[[ $(id -u) == 0 ]] || die "packages missing (${missing[*]}) and not root: run deploy/local/install.sh as root"
	command -v apt-get >/dev/null || die "apt-get not found: this installer supports Debian bookworm only; install ${missing[*]} by hand"

	log "apt: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	local aptlog
	aptlog=$(mktemp /tmp/tributary-apt.XXXXXX)
	# --no-install-recommends: Prometheus would otherwise pull in exporters
	# and their services, which the stack does not use.
	if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$aptlog" 2>&1; then
		tail -n 30 "$aptlog" >&2
		die "apt-get failed installing ${missing[*]} (full log: $aptlog); check the package names with apt-cache policy, and that the Debian mirror is reachable"
	fi
	rm -f "$aptlog"
	for p in "${missing[@]}"; do
		pkg_installed "$p" || die "apt-get reported success but $p is not installed"
	done
	log "apt: done"
}

# check_tools verifies the commands the stack runs, whatever installed them.
check_tools() {
	local t
	for t in java mvn go kcat clickhouse-server clickhouse-client psql runuser flock setsid timeout openssl; do
		command -v "$t" >/dev/null || die "$t not found after install; install it (see deploy/local/install.sh) and run again"
	done
	[[ -x $PG_BIN/initdb && -x $PG_BIN/pg_ctl ]] || die "PostgreSQL 15 server binaries missing in $PG_BIN: apt-get install postgresql-15"
	id postgres >/dev/null 2>&1 || die "user postgres missing (the postgresql-15 package creates it): reinstall postgresql-15"
	local jv
	jv=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
	[[ -n $jv && $jv -ge 17 ]] || die "Kafka $KAFKA_VERSION needs Java 17 or newer, found '${jv:-unknown}' (java -version): install openjdk-17-jre-headless"
}

# fetch_jars copies an artifact and its runtime dependencies, as listed by
# a pom.xml here, from Maven Central into a cache directory. It writes into a
# temporary directory and renames it at the end, so an interrupted run never
# leaves a cache that looks complete.
#   fetch_jars WHAT POM CACHE MAIN_JAR COORDINATES
fetch_jars() {
	local what=$1 pom=$2 cache=$3 main=$4 coords=$5
	if jars_complete "$cache" "$main"; then
		log "$what jars: present in $cache ($(($(wc -l <"$cache/$KAFKA_JARS_MANIFEST"))) jars)"
		return
	fi
	local parent tmp mvnlog
	parent=$(dirname "$cache")
	mkdir -p "$parent" || die "cannot create $parent for the $what jar cache; set its TRIBUTARY_*_JARS variable to a writable directory"
	tmp=$(mktemp -d "$parent/.$what-jars.XXXXXX")
	mvnlog=$tmp.log
	log "$what jars: fetching $coords and dependencies from Maven Central"
	if ! mvn -B -q -f "$pom" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$tmp" >"$mvnlog" 2>&1; then
		tail -n 30 "$mvnlog" >&2
		rm -rf "$tmp"
		die "maven could not fetch the $what jars (log: $mvnlog); check that Maven Central is reachable (mvn -B dependency:get -Dartifact=$coords)"
	fi
	[[ -s $tmp/$main ]] || die "maven finished but $main is not in $tmp (log: $mvnlog)"
	(cd "$tmp" && ls -1 -- *.jar >"$KAFKA_JARS_MANIFEST")
	rm -rf "$cache" "$mvnlog"
	mv "$tmp" "$cache"
	jars_complete "$cache" "$main" || die "$what jar cache $cache is incomplete right after the copy; remove it and run again"
	log "$what jars: $(($(wc -l <"$cache/$KAFKA_JARS_MANIFEST"))) jars in $cache ($(du -sh "$cache" | cut -f1))"
}

fetch_kafka_jars() {
	fetch_jars kafka "$HERE/kafka/pom.xml" "$KAFKA_JARS" "kafka_2.13-$KAFKA_VERSION.jar" "org.apache.kafka:kafka_2.13:$KAFKA_VERSION"
}

# fetch_zookeeper_jars: the ZooKeeper server of the stack's ClickHouse
# cluster mode (TRIBUTARY_CLICKHOUSE=cluster); small (~10 MB), so always.
fetch_zookeeper_jars() {
	fetch_jars zookeeper "$HERE/zookeeper/pom.xml" "$ZOOKEEPER_JARS" "zookeeper-$ZOOKEEPER_VERSION.jar" "org.apache.zookeeper:zookeeper:$ZOOKEEPER_VERSION"
}

# --- chDB (current ClickHouse for the compatibility test) ---

CHDB_VERSION=26.9.0
CHDB_VENV=${TRIBUTARY_CHDB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/tributary/chdb-venv}

# chdb_present: the venv imports chdb at CHDB_VERSION.
chdb_present() {
	[[ -x $CHDB_VENV/bin/python ]] &&
		[[ $("$CHDB_VENV/bin/python" -c 'import chdb; print(chdb.__version__)' 2>/dev/null) == "$CHDB_VERSION" ]]
}

# install_chdb builds the venv beside its final place and moves it there
# once pip succeeded, so that an interrupted install leaves no half venv
# (and the test, which looks for the final place, never uses one).
install_chdb() {
	if chdb_present; then
		log "chdb: chdb-core $CHDB_VERSION present in $CHDB_VENV"
		return
	fi
	command -v python3 >/dev/null || die "python3 not found (apt-get install python3 python3-venv)"
	local parent tmp piplog
	parent=$(dirname "$CHDB_VENV")
	mkdir -p "$parent" || die "cannot create $parent for the chDB venv; set TRIBUTARY_CHDB_VENV to a writable directory"
	tmp=$(mktemp -d "$parent/.chdb-venv.XXXXXX")
	piplog=$tmp.log
	log "chdb: installing chdb-core $CHDB_VERSION from PyPI into $CHDB_VENV (~530 MB)"
	if ! { python3 -m venv "$tmp" && "$tmp/bin/pip" install -q "chdb-core==$CHDB_VERSION"; } >"$piplog" 2>&1; then
		tail -n 30 "$piplog" >&2
		rm -rf "$tmp"
		die "chdb: could not install chdb-core $CHDB_VERSION (log: $piplog); is python3-venv installed and PyPI reachable?"
	fi
	# The venv's bin/python works from its new place; its wrapper scripts
	# (bin/pip) name the old one: use "$CHDB_VENV/bin/python -m pip".
	rm -rf "$CHDB_VENV" "$piplog"
	mv "$tmp" "$CHDB_VENV"
	chdb_present || die "chdb: $CHDB_VENV does not import chdb $CHDB_VERSION right after the install"
	log "chdb: chdb-core $CHDB_VERSION in $CHDB_VENV ($(du -sh "$CHDB_VENV" | cut -f1))"
}

main() {
	case ${1:-} in
	-h | --help) usage; return ;;
	"") ;;
	*) usage >&2; die "unknown argument: $1" ;;
	esac
	install_packages
	check_tools
	fetch_kafka_jars
	fetch_zookeeper_jars
	install_chdb
	log "install: done"
}

main "$@"
