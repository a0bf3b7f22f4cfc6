#!/usr/bin/env bash
# make demo: runs kproxy on a services file inside a throwaway network
# namespace (so nothing on the host is touched), shows its health, proxy mode,
# metrics and the service map it builds, then stops it with SIGTERM.
set -euo pipefail
kproxy=$(realpath "$1")
manifest=$(realpath "$2")

if [ -z "${KPROXY_DEMO_INNER:-}" ]; then
	exec env KPROXY_DEMO_INNER=1 unshare --net -- "$0" "$@"
fi

ip link set lo up
log=$(mktemp /tmp/kproxy-demo.XXXXXX.log)
echo "== kproxy --services-file $manifest (log: $log)"
"$kproxy" --services-file "$manifest" --hostname-override kproxy-demo \
	--healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249 -v 2 >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT

for _ in $(seq 100); do
	curl -fsS -o /dev/null http://127.0.0.1:10256/healthz 2>/dev/null && break
	kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "kproxy exited early"; exit 1; }
	sleep 0.1
done
sleep 1 # let the first sync finish and log
echo "== GET /healthz";   curl -sS http://127.0.0.1:10256/healthz; echo
echo "== GET /proxyMode"; curl -sS http://127.0.0.1:10249/proxyMode; echo
echo "== GET /metrics (sync metrics)"
curl -sS http://127.0.0.1:10249/metrics | grep -E '^(kubeproxy_sync_proxy_rules_(last_timestamp_seconds|duration_seconds_count|service_changes_total|endpoint_changes_total)|kproxy_(service_ports|endpoints|services_file_[a-z_]+)) ' || true
echo "== the service map kproxy built (from its log)"
grep -E 'Would program|mode|Selected|preview' "$log" | cut -c1-400 || true
kill -TERM "$pid"
wait "$pid" && echo "== kproxy stopped cleanly on SIGTERM" || { echo "kproxy exited with $?"; tail -20 "$log"; exit 1; }
trap - EXIT
