# shellcheck shell=bash
# Helpers of stack.sh: ports, pid files, waiting, stopping, parallel jobs.
# Sourced by deploy/local/stack.sh, which sets the configuration variables.

# port_open tells whether something accepts TCP connections on HOST:port.
port_open() {
	timeout 1 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

# port_holder describes the process listening on a port, for error messages.
port_holder() {
	local port=$1 line pid
	if command -v ss >/dev/null; then
		line=$(ss -Hltnp "( sport = :$port )" 2>/dev/null | head -n1)
		pid=$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' <<<"$line" | head -n1)
		if [[ -n $pid ]]; then
			printf 'pid %s: %s' "$pid" "$(ps -o args= -p "$pid" | cut -c1-160)"
			return
		fi
	fi
	printf 'an unknown process (ss -ltnp shows it as root)'
}

# require_port_free fails clearly when a port we are about to bind is taken,
# by a listener or by the local end of a live connection. Closing states do
# not count: they are what a killed server leaves behind (FIN-WAIT-1/2,
# CLOSING, LAST-ACK until its clients close their side, then TIME-WAIT),
# and every server here binds with SO_REUSEADDR, which Linux allows next to
# sockets that are not listening.
require_port_free() {
	local port=$1 what=$2 line
	if port_open "$port"; then
		die "port $port, needed by $what, is in use by $(port_holder "$port"); stop it, or if it is an earlier stack under another TRIBUTARY_HOME, run stack.sh down with that TRIBUTARY_HOME"
	fi
	command -v ss >/dev/null || return 0
	line=$(ss -Htanp "( sport = :$port )" 2>/dev/null | grep -Ev '^(TIME-WAIT|FIN-WAIT-1|FIN-WAIT-2|CLOSING|LAST-ACK)' | head -n1 || true)
	[[ -z $line ]] ||
		die "port $port, needed by $what, is the local end of a connection: $line; it frees when that connection closes (stack.sh reserves its ports against this from now on)"
}

# reserve_ports keeps the kernel from handing the stack's ports to outgoing
# connections. They lie in Linux's ephemeral range (32768-60999), so without
# this a client socket, such as the Kafka broker's own connection to its
# controller, can take e.g. port 59192 as its local end, and the embedded
# broker's bind then fails with "address already in use" (seen here). The
# kernel merges the list with what is reserved already. Not fatal: without
# write access to /proc/sys the stack mostly works anyway.
reserve_ports() {
	local file=/proc/sys/net/ipv4/ip_local_reserved_ports current list
	current=$(cat "$file" 2>/dev/null) || return 0
	# One sorted list of disjoint ranges, in one write(2): each write
	# replaces the whole list, and the shell's echo and printf write 1024
	# bytes at a time (the file's block size), so dd writes it. The kernel
	# refused (EINVAL) an unsorted list that repeated ports, and a refused
	# write leaves the list empty.
	list=$(printf '%s\n' ${current//,/ } "$@" | awk -F- '{b = NF > 1 ? $2 : $1; for (p = $1; p <= b; p++) print p}' | sort -n -u |
		awk 'function out() { printf "%s%s%s", sep, s, (e > s ? "-" e : ""); sep = "," }
			NR == 1 { s = e = $1; next } $1 == e + 1 { e = $1; next } { out(); s = e = $1 } END { if (NR) out() }')
	if ! dd of="$file" bs=65536 status=none 2>/dev/null <<<"$list"; then
		log "warning: could not reserve ports $* in $file; a connection may occupy one of them now and then (bind: address already in use)"
	fi
}

# pid_matches tells whether pid is alive and its command line contains the
# given text: a pid file can outlive its process and the pid be reused.
pid_matches() {
	local pid=$1 text=$2
	[[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$text"
}

# pidfile_alive prints the pid from a pid file when that process is still ours.
pidfile_alive() {
	local file=$1 text=$2 pid
	[[ -s $file ]] || return 1
	pid=$(head -n1 "$file")
	pid_matches "$pid" "$text" || return 1
	printf '%s' "$pid"
}

# pidfile_started tells whether the process in a pid file we just wrote
# runs. Unlike pidfile_alive it does not look at the command line: right
# after `cmd &` the child may not have exec'd yet and still looks like bash.
# A child that died stays a zombie until we exit, so the state must not be Z.
pidfile_started() {
	local pid state
	pid=$(head -n1 "$1" 2>/dev/null) && [[ $pid =~ ^[0-9]+$ ]] || return 1
	state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[[ -n $state && $state != Z ]]
}

# wait_ready polls a check until it succeeds. It gives up when the process
# it waits for has died (the alive function fails) or after WAIT_TIMEOUT
# seconds; then it prints the tail of the logs (a colon-separated list), sets
# WAIT_ERROR and returns 1, so that the caller can stop what it started
# before it dies. The alive check is one word or a command with arguments in
# one string ("ch_node_pid 2"); the ready check is the remaining arguments.
WAIT_ERROR=''
# shellcheck disable=SC2034 # WAIT_ERROR is read by the callers
wait_ready() {
	local what=$1 logfile=$2 alive=$3 f
	shift 3
	local deadline=$((SECONDS + WAIT_TIMEOUT))
	until "$@" >/dev/null 2>&1; do
		# shellcheck disable=SC2086 # alive is a command and its arguments
		if ! $alive >/dev/null 2>&1; then
			WAIT_ERROR="$what exited while starting (log: $logfile)"
		elif ((SECONDS >= deadline)); then
			WAIT_ERROR="$what not ready after ${WAIT_TIMEOUT}s (log: $logfile); raise TRIBUTARY_WAIT_TIMEOUT if the machine is just slow"
		else
			sleep 0.2
			continue
		fi
		local -a logs
		IFS=: read -ra logs <<<"$logfile"
		for f in "${logs[@]}"; do
			[[ -s $f ]] && tail -n 15 "$f" | sed "s|^|    ${f##*/}: |" >&2
		done
		return 1
	done
}

# stop_pid sends SIGTERM and waits; SIGKILL after the timeout, with a warning,
# so that `down` always leaves nothing running.
stop_pid() {
	local what=$1 pid=$2 timeout=$3
	kill -TERM "$pid" 2>/dev/null || return 0
	local deadline=$((SECONDS + timeout))
	while kill -0 "$pid" 2>/dev/null; do
		if ((SECONDS >= deadline)); then
			log "$what (pid $pid) did not stop within ${timeout}s: killing it"
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.1
	done
}

# run_parallel runs "name:function args..." jobs in the background and waits
# for all of them; it fails if any failed (each job reports its own error).
run_parallel() {
	local -a pids=() names=()
	local job failed=()
	for job in "$@"; do
		# shellcheck disable=SC2086 # job is "function arg..." by construction
		${job#*:} &
		pids+=($!)
		names+=("${job%%:*}")
	done
	local i
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || failed+=("${names[$i]}")
	done
	((${#failed[@]} == 0)) || die "failed: ${failed[*]} (see the errors above)"
}
