#!/usr/bin/env bash
# Ingest side by side: VictoriaMetrics v1.151.0, Strata standalone on file://
# and Strata standalone on MinIO, each fresh, loaded by the same loader
# (`strata bench ingest`, InfluxDB line protocol to /api/v2/write) with the
# same data, in interleaved turns. Prints every run, then per server the
# median and range of rows/s, the ratio of medians to VictoriaMetrics, and
# peak RSS (process_resident_memory_bytes on the server's /metrics), and the
# CPU the server and the loader spent during the run (MinIO's own CPU is not
# in strata-minio's server figure). After each run, before the server stops,
# the loader counts every series and sample back through the server's
# /api/v1/query and fails the script if one is missing: a ratio against a
# server that dropped rows is no comparison.
#
#   scripts/bench-peers.sh                       # 3 turns, 4 workers x 10,000 rows
#   TURNS=5 WORKERS=8 BATCH=5000 scripts/bench-peers.sh
#
# Needs MinIO (scripts/test.sh installs it) and installs VictoriaMetrics into
# ~/.cache/strata/bin the first time.
set -euo pipefail
cd "$(dirname "$0")/.."

TURNS=${TURNS:-3}
WORKERS=${WORKERS:-4}
BATCH=${BATCH:-10000}
ROWS=${ROWS:-1440000}
. scripts/peers-lib.sh
need_minio

# MinIO, shared by the MinIO turns (a fresh bucket per run).
export AWS_ACCESS_KEY_ID=strata-bench AWS_SECRET_ACCESS_KEY=strata-bench-secret AWS_REGION=us-east-1
mport=$(free_port)
MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY MINIO_BROWSER=off \
	"$MINIO" server --quiet --address "127.0.0.1:$mport" --console-address "127.0.0.1:$(free_port)" "$work/minio" >"$work/minio.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$mport/minio/health/ready"

# run NAME: start a fresh server, load it, stop it; appends "name rows/s rss_mib" to $work/results.
run() {
	local name=$1 port dir pid url
	port=$(free_port)
	dir=$(mktemp -d -p "$work")
	case $name in
	victoriametrics)
		# The loader stamps rows from 2026-01-01: past VictoriaMetrics'
		# default retention (1 month), which drops them silently. The
		# loader's check (--verify) fails a run that lost any.
		"$BIN/victoria-metrics" -storageDataPath "$dir" -httpListenAddr "127.0.0.1:$port" -loggerLevel ERROR -retentionPeriod 100y >"$dir/log" 2>&1 &
		pid=$!
		wait_http "http://127.0.0.1:$port/health"
		;;
	strata-file | strata-minio)
		local store="file://$dir/store"
		if [ "$name" = strata-minio ]; then
			local bucket="bench-$RANDOM$RANDOM"
			store="s3://$bucket?endpoint=http%3A%2F%2F127.0.0.1%3A$mport&use_path_style=true&region=us-east-1"
			"$work/strata" store init --store "$store" >/dev/null
		fi
		"$work/strata" standalone --data-dir "$dir" --store "$store" --http-addr "127.0.0.1:$port" --grpc-addr "127.0.0.1:$(free_port)" --log-level warn >"$dir/log" 2>&1 &
		pid=$!
		wait_http "http://127.0.0.1:$port/health"
		;;
	esac
	url="http://127.0.0.1:$port"
	"$work/strata" bench ingest --url "$url" --rows "$ROWS" --batch "$BATCH" --workers "$WORKERS" >"$dir/bench.txt" 2>&1 || {
		cat "$dir/bench.txt" "$dir/log" >&2
		kill "$pid"
		return 1
	}
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	local rate rss scpu ccpu
	rate=$(awk '/rows\/s/ { for (i = 1; i <= NF; i++) if ($i ~ /rows\/s/) { gsub(",", "", $(i-1)); print $(i-1); exit } }' "$dir/bench.txt")
	rss=$(awk '/server RSS/ { for (i = 1; i <= NF; i++) if ($i == "MiB") { print $(i-1); exit } }' "$dir/bench.txt")
	scpu=$(awk '/^CPU:/ { for (i = 1; i <= NF; i++) if ($i == "server") { print $(i+1); exit } }' "$dir/bench.txt")
	ccpu=$(awk '/^CPU:/ { for (i = 1; i <= NF; i++) if ($i == "client") { print $(i+1); exit } }' "$dir/bench.txt")
	echo "$name ${rate:-0} ${rss:-0} ${scpu:-0} ${ccpu:-0}" >>"$work/results"
	printf '%-16s %10s rows/s  peak RSS %s MiB  CPU server %s s, loader %s s\n' "$name" "${rate:-?}" "${rss:-?}" "${scpu:-?}" "${ccpu:-?}"
	rm -rf "$dir"
}

echo "loader: strata bench ingest --rows $ROWS --batch $BATCH --workers $WORKERS; $TURNS turns"
for turn in $(seq 1 "$TURNS"); do
	echo "turn $turn"
	for name in victoriametrics strata-file strata-minio; do
		run "$name"
	done
done

python3 - "$work/results" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, rate, rss, scpu, ccpu = line.split()
    runs.setdefault(name, []).append((float(rate), float(rss), float(scpu), float(ccpu)))
vm = statistics.median(r[0] for r in runs.get("victoriametrics", [(0,)]))
print()
print("| server | rows/s median | range | × VictoriaMetrics | peak RSS MiB (max) | server CPU s a run (median) | loader CPU s |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for name in ("victoriametrics", "strata-file", "strata-minio"):
    rs = runs.get(name, [])
    if not rs:
        continue
    rates = [r[0] for r in rs]
    med = statistics.median(rates)
    ratio = med / vm if vm else float("nan")
    scpu = statistics.median(r[2] for r in rs)
    ccpu = statistics.median(r[3] for r in rs)
    print(f"| {name} | {med:,.0f} | {min(rates):,.0f}–{max(rates):,.0f} | {ratio:.2f} | {max(r[1] for r in rs):.0f} | {scpu:.2f} | {ccpu:.2f} |")
EOF
