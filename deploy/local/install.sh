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
apt packages (only those missing) and the Kafka $KAFKA_VERSION broker jars into
$KAFKA_JARS (skipped when already complete).

Environment:
  TRIBUTARY_KAFKA_JARS  jar cache directory (default ~/.cache/tributary/kafka-$KAFKA_VERSION)
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

# fetch_kafka_jars copies kafka_2.13 and its runtime dependencies from Maven
# Central into the cache. It writes into a temporary directory and renames it
# at the end, so an interrupted run never leaves a cache that looks complete.
fetch_kafka_jars() {
	if jars_complete "$KAFKA_JARS"; then
		log "kafka jars: present in $KAFKA_JARS ($(($(wc -l <"$KAFKA_JARS/$KAFKA_JARS_MANIFEST"))) jars)"
		return
	fi
	local parent tmp mvnlog
	parent=$(dirname "$KAFKA_JARS")
	mkdir -p "$parent" || die "cannot create $parent for the Kafka jar cache; set TRIBUTARY_KAFKA_JARS to a writable directory"
	tmp=$(mktemp -d "$parent/.kafka-jars.XXXXXX")
	mvnlog=$tmp.log
	log "kafka jars: fetching org.apache.kafka:kafka_2.13:$KAFKA_VERSION and dependencies from Maven Central"
	if ! mvn -B -q -f "$HERE/kafka/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$tmp" >"$mvnlog" 2>&1; then
		tail -n 30 "$mvnlog" >&2
		rm -rf "$tmp"
		die "maven could not fetch the Kafka jars (log: $mvnlog); check that Maven Central is reachable (mvn -B dependency:get -Dartifact=org.apache.kafka:kafka_2.13:$KAFKA_VERSION)"
	fi
	[[ -s $tmp/kafka_2.13-$KAFKA_VERSION.jar ]] || die "maven finished but kafka_2.13-$KAFKA_VERSION.jar is not in $tmp (log: $mvnlog)"
	(cd "$tmp" && ls -1 -- *.jar >"$KAFKA_JARS_MANIFEST")
	rm -rf "$KAFKA_JARS" "$mvnlog"
	mv "$tmp" "$KAFKA_JARS"
	jars_complete "$KAFKA_JARS" || die "kafka jar cache $KAFKA_JARS is incomplete right after the copy; remove it and run again"
	log "kafka jars: $(($(wc -l <"$KAFKA_JARS/$KAFKA_JARS_MANIFEST"))) jars in $KAFKA_JARS ($(du -sh "$KAFKA_JARS" | cut -f1))"
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
	install_chdb
	log "install: done"
}

main "$@"
