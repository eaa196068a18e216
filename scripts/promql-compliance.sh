#!/usr/bin/env bash
# The PromQL compliance tester (github.com/prometheus/compliance, promql/)
# against a fresh `strata standalone`: a reference Prometheus v0.316.0 (3.x)
# scrapes three demo-service instances every 5 s, as the tester's query file
# expects, and remote-writes everything (staleness markers included) to
# Strata. After DURATION the tester runs its query file over a window of both
# (reference = Prometheus, test = Strata) and the script prints the score and
# every failing case, and exits as the tester does (0: all passed).
#
#   scripts/promql-compliance.sh                   # 65 minutes of data, the tester's own window
#   DURATION=20m scripts/promql-compliance.sh      # shorter: a 6-minute window
#
# The window is the tester's default, 10 minutes ending 12 minutes before it
# runs (12 minutes: the query file's `offset -10m` must not reach past what
# both hold), shortened to DURATION − 14m when that is less (WINDOW sets
# it; at least 1m); END_LAG moves its end. The three demo instances are
# internal/demoservice (the metrics of github.com/juliusv/prometheus_demo_service),
# labelled instance="demo.promlabs.com:10000" ... "10002" as the query file
# names them; DEMO_BIN runs another binary taking -listen-address instead.
#
# The query file is the tester's own with one change: its two should_fail
# cases that set the label name "~invalid" use "\xff" instead (since
# Prometheus 3.0 "~invalid" is a valid UTF-8 label name; upstream does the
# same), so all 539 cases count.
#
# Prometheus is installed with `go install` into ~/.cache/strata/bin (as
# scripts/test.sh does; about 8 minutes on 2 cores the first time), and so
# is the tester, from the module proxy at TESTER_VERSION. Where the proxy
# does not serve the tester, build it yourself and set TESTER_BIN to it and
# QUERIES to its promql/promql-test-queries.yml. PROMETHEUS_BIN likewise.
# KEEP=1 leaves the work directory (configs, logs, the tester's output).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-65m}
END_LAG=${END_LAG:-12m}
TESTER_VERSION=${TESTER_VERSION:-v0.0.0-20260806071727-67b8327a2e93}
PROMETHEUS_VERSION=v0.316.0

BIN=${STRATA_BIN_CACHE:-$HOME/.cache/strata/bin}
mkdir -p "$BIN"

secs() { # a Go-style duration (1h5m, 65m, 90s) -> seconds
	python3 -c '
import re, sys
s, n = sys.argv[1], 0
parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s)", s)
if not parts or "".join(a + b for a, b in parts) != s:
    sys.exit("not a duration: " + s)
for v, u in parts:
    n += float(v) * {"h": 3600, "m": 60, "s": 1}[u]
print(int(n))' "$1"
}
duration_s=$(secs "$DURATION")
lag_s=$(secs "$END_LAG")
if [ -n "${WINDOW:-}" ]; then
	window_s=$(secs "$WINDOW")
else
	window_s=$((duration_s - lag_s - 120))
	if [ "$window_s" -gt 600 ]; then window_s=600; fi
fi
if [ "$window_s" -lt 60 ] || [ $((lag_s + window_s)) -ge "$duration_s" ]; then
	echo "DURATION=$DURATION leaves no window of at least 1m ending END_LAG=$END_LAG before the end: use DURATION of at least $(((lag_s + 180) / 60))m" >&2
	exit 2
fi

# install NAME BINARY MODULE@VERSION: go install into $BIN unless there, or
# wait for another process's install of it to finish.
install() {
	if [ ! -x "$BIN/$2" ] && pgrep -f "go install $3" >/dev/null; then
		echo "waiting for the running install of $1 into $BIN..."
		while [ ! -x "$BIN/$2" ] && pgrep -f "go install $3" >/dev/null; do
			sleep 5 # another process's install: no signal to wait on
		done
	fi
	if [ ! -x "$BIN/$2" ]; then
		echo "installing $1 into $BIN (first run only)..."
		GOBIN="$BIN" GOFLAGS=-buildvcs=false go install "$3"
	fi
}

tester_mod=github.com/prometheus/compliance/promql
if [ -z "${PROMETHEUS_BIN:-}" ]; then
	install Prometheus prometheus "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
	PROMETHEUS_BIN=$BIN/prometheus
fi
if [ -z "${TESTER_BIN:-}" ]; then
	install "the PromQL compliance tester" promql-compliance-tester "$tester_mod/cmd/promql-compliance-tester@$TESTER_VERSION"
	TESTER_BIN=$BIN/promql-compliance-tester
fi
if [ -z "${QUERIES:-}" ]; then
	# The module's source, which go install just downloaded (outside this
	# module, so that its go.mod is left alone).
	QUERIES=$(cd / && go mod download -json "$tester_mod@$TESTER_VERSION" |
		python3 -c 'import json, sys; d = json.load(sys.stdin); sys.exit(d["Error"]) if "Error" in d else print(d["Dir"])')/promql-test-queries.yml
fi
[ -r "$QUERIES" ] || { echo "no query file at $QUERIES" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ "${KEEP:-0}" = 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

echo "building strata and the demo service..."
go build -o "$work/strata" ./cmd/strata
if [ -z "${DEMO_BIN:-}" ]; then
	go build -o "$work/demoservice" ./internal/demoservice
	DEMO_BIN=$work/demoservice
fi

. scripts/net-lib.sh

strata_http=127.0.0.1:$(free_port)
"$work/strata" standalone --data-dir "$work/strata-data" --http-addr "$strata_http" \
	--grpc-addr "127.0.0.1:$(free_port)" --log-level warn >"$work/strata.log" 2>&1 &
pids+=($!)
wait_http "http://$strata_http/health"

targets=""
for i in 0 1 2; do
	addr=127.0.0.1:$(free_port)
	"$DEMO_BIN" -listen-address "$addr" >"$work/demo$i.log" 2>&1 &
	pids+=($!)
	wait_http "http://$addr/metrics"
	targets+="
      - targets: ['$addr']
        labels: {instance: 'demo.promlabs.com:1000$i'}"
done

prom_http=127.0.0.1:$(free_port)
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 5s
scrape_configs:
  - job_name: demo
    static_configs:$targets
remote_write:
  - url: http://$strata_http/api/v1/write
    queue_config: {batch_send_deadline: 1s}
EOF
"$PROMETHEUS_BIN" --config.file "$work/prometheus.yml" --storage.tsdb.path "$work/prometheus-data" \
	--web.listen-address "$prom_http" --log.level warn >"$work/prometheus.log" 2>&1 &
pids+=($!)
wait_http "http://$prom_http/-/ready"

echo "collecting for $DURATION (until $(date -d "+$duration_s seconds" '+%H:%M:%S')): Prometheus $PROMETHEUS_VERSION at $prom_http, strata at $strata_http, work in $work"
sleep "$duration_s" # the workload itself: Prometheus scrapes on its own clock

# The query file with "\xff" for "~invalid"; both targets and the window.
sed 's/"~invalid"/"\\xff"/' "$QUERIES" >"$work/queries.yml"
end=$(($(date +%s) - lag_s))
cat >"$work/targets.yml" <<EOF
reference_target_config:
  query_url: http://$prom_http
test_target_config:
  query_url: http://$strata_http
query_time_parameters:
  end_time: '$end'
  range_in_seconds: $window_s
EOF
echo "testing the window $(date -u -d "@$((end - window_s))" '+%H:%M:%S')-$(date -u -d "@$end" '+%H:%M:%S') UTC ($((window_s / 60))m$((window_s % 60))s, 10 s steps)..."
rc=0
"$TESTER_BIN" -config-file "$work/queries.yml" -config-file "$work/targets.yml" >"$work/tester.txt" 2>"$work/tester.err" || rc=$?
if ! grep -q '^Total:' "$work/tester.txt"; then
	cat "$work/tester.err" "$work/tester.txt" >&2
	exit 1
fi
# The failing cases (the text output prints each with its diff), then the
# score line.
grep -v '^Total:' "$work/tester.txt" || true
grep '^Total:' "$work/tester.txt"
exit "$rc"
