# Shared by the deploy scripts; source it, do not run it.

# wait_for URL: poll URL for up to 10 s until it answers 2xx; return 1 (with
# a message naming the calling script) if it never does.
wait_for() {
	for _ in $(seq 1 100); do
		curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "$(basename "$0"): $1 did not come up" >&2
	return 1
}

# stop_all: TERM every process in the calling script's pids array, wait for
# them, and empty the array.
stop_all() {
	if [ ${#pids[@]} -gt 0 ]; then
		kill -TERM "${pids[@]}" 2>/dev/null || true
		wait "${pids[@]}" 2>/dev/null || true
	fi
	pids=()
}
