#!/usr/bin/env bash
# Prometheus remote write side by side: a fresh VictoriaMetrics v1.151.0 and
# a fresh `strata standalone` (file:// store, or MinIO with STORE=minio),
# each loaded by the same generator with the same data
# (`strata bench remote-write`, avalanche-shaped: NAMES metric names ×
# SERIES series × LABELS labels, SCRAPES scrapes INTERVAL apart), each run
# checked through the server's own /api/v1/query. Prints every run, then a
# table: samples/s, series created/s, p50/p99 request latency, peak RSS
# (process_resident_memory_bytes on the server's /metrics), server CPU,
# stored series and samples against those sent, and Strata over
# VictoriaMetrics.
#
#   scripts/bench-remote-write.sh                      # 1000 × 10 × 15, 10 scrapes
#   NAMES=100000 SERIES=10 SCRAPES=10 scripts/bench-remote-write.sh
#   STORE=minio CHURN=0.1 STALE_MARKERS=1 WORKERS=8 scripts/bench-remote-write.sh
#
# PROTOCOL=2.0 sends remote write 2.0 to both; VictoriaMetrics v1.151.0
# answers a 2.0 body 204 and stores nothing of it (the run reports the 2xx
# answers without a written count, and its check fails). NAN_FRACTION > 0
# fails VictoriaMetrics' check by exactly the NaN samples (it drops NaN at
# ingestion); Strata stores them.
#
# After each check, a second table: the times of 200
# /api/v1/label/__name__/values requests (p50, p99, max, and the first's:
# the one that finds nothing kept) and of 3
# count by (__name__) queries over the run's series, each answer checked
# to hold every name sent.
#
# Installs VictoriaMetrics into ~/.cache/strata/bin the first time; needs
# MinIO there for STORE=minio (scripts/test.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

NAMES=${NAMES:-1000}
SERIES=${SERIES:-10}
LABELS=${LABELS:-15}
SCRAPES=${SCRAPES:-10}
INTERVAL=${INTERVAL:-15s}
CHURN=${CHURN:-0}
NAN_FRACTION=${NAN_FRACTION:-0}
STALE_MARKERS=${STALE_MARKERS:-0}
BATCH=${BATCH:-2000}
WORKERS=${WORKERS:-4}
PROTOCOL=${PROTOCOL:-1.0}
STORE=${STORE:-file}
. scripts/peers-lib.sh
if [ "$STORE" = minio ]; then
	need_minio
fi

if [ "$STORE" = minio ]; then
	export AWS_ACCESS_KEY_ID=strata-bench AWS_SECRET_ACCESS_KEY=strata-bench-secret AWS_REGION=us-east-1
	mport=$(free_port)
	MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY MINIO_BROWSER=off \
		"$MINIO" server --quiet --address "127.0.0.1:$mport" --console-address "127.0.0.1:$(free_port)" "$work/minio" >"$work/minio.log" 2>&1 &
	pids+=($!)
	wait_http "http://127.0.0.1:$mport/minio/health/ready"
fi

args=(--names "$NAMES" --series "$SERIES" --labels "$LABELS" --scrapes "$SCRAPES" --interval "$INTERVAL"
	--churn "$CHURN" --nan-fraction "$NAN_FRACTION" --batch "$BATCH" --workers "$WORKERS" --protocol "$PROTOCOL" --json)
if [ "$STALE_MARKERS" = 1 ]; then args+=(--stale-markers); fi

# run NAME: start a fresh server, load and check it, stop it; the result
# is $work/NAME.json (and its exit status $work/NAME.rc).
run() {
	local name=$1 port dir pid rc=0
	port=$(free_port)
	dir="$work/run-$name"
	mkdir -p "$dir"
	case $name in
	victoriametrics)
		# The count by (__name__) probe over a million series can take
		# longer than VictoriaMetrics' default query bound (30 s) on a
		# loaded 2-core machine: both servers get 10 minutes.
		"$BIN/victoria-metrics" -storageDataPath "$dir/data" -httpListenAddr "127.0.0.1:$port" -loggerLevel ERROR -search.maxQueryDuration 10m >"$dir/log" 2>&1 &
		pid=$!
		wait_http "http://127.0.0.1:$port/health"
		;;
	strata)
		local store="file://$dir/store"
		if [ "$STORE" = minio ]; then
			store="s3://bench-$RANDOM$RANDOM?endpoint=http%3A%2F%2F127.0.0.1%3A$mport&use_path_style=true&region=us-east-1"
			"$work/strata" store init --store "$store" >/dev/null
		fi
		"$work/strata" standalone --data-dir "$dir" --store "$store" --http-addr "127.0.0.1:$port" --grpc-addr "127.0.0.1:$(free_port)" --query-timeout 10m --log-level warn >"$dir/log" 2>&1 &
		pid=$!
		wait_http "http://127.0.0.1:$port/health"
		;;
	esac
	"$work/strata" bench remote-write --url "http://127.0.0.1:$port/api/v1/write" "${args[@]}" >"$work/$name.json" 2>"$dir/stderr" || rc=$?
	echo "$rc" >"$work/$name.rc"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	if [ "$rc" != 0 ]; then
		echo "$name: exit $rc: $(cat "$dir/stderr")" >&2
		tail -n 5 "$dir/log" >&2 || true
	fi
}

echo "loader: strata bench remote-write ${args[*]}; Strata on $STORE"
for name in victoriametrics strata; do
	echo "$name..."
	run "$name"
done

python3 - "$work" <<'EOF'
import json, os, sys
work = sys.argv[1]
rows = {}
for name in ("victoriametrics", "strata"):
    try:
        rows[name] = json.load(open(os.path.join(work, name + ".json")))
    except (OSError, ValueError):
        rows[name] = None
print()
print("| server | samples/s | series/s | p50 ms | p99 ms | peak RSS MiB | server CPU s | loader CPU s | non-2xx | stored series | stored samples | verified |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for name, r in rows.items():
    if r is None:
        print(f"| {name} | failed before reporting |  |  |  |  |  |  |  |  |  |  |")
        continue
    v = r.get("verify") or {}
    cpu = r.get("server_cpu_seconds")
    print(f"| {name} | {r['samples_per_second']:,.0f} | {r['series_per_second']:,.0f} | {r['latency_p50_seconds']*1e3:.1f} | {r['latency_p99_seconds']*1e3:.1f} | "
          f"{r['peak_rss_bytes']/2**20:.0f} | {'?' if cpu is None else f'{cpu:.2f}'} | {r['client_cpu_seconds']:.2f} | {r['non_2xx']} | "
          f"{v.get('stored_series', '?')} of {v.get('expected_series', '?')} | {v.get('stored_samples', '?')} of {v.get('expected_samples', '?')} | "
          f"{'yes' if v.get('ok') else 'NO'} |")
vm, st = rows["victoriametrics"], rows["strata"]
if vm and st:
    ratio = lambda k: st[k] / vm[k] if vm[k] else float("nan")
    print(f"| strata ÷ victoriametrics | {ratio('samples_per_second'):.2f} | {ratio('series_per_second'):.2f} | {ratio('latency_p50_seconds'):.1f} | "
          f"{ratio('latency_p99_seconds'):.1f} | {ratio('peak_rss_bytes'):.1f} |  |  |  |  |  |  |")
print()
print("| server | names listed | label values p50 ms | p99 ms | max ms | first ms | count by (__name__) s |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for name, r in rows.items():
    p = (r or {}).get("probe")
    if not p:
        print(f"| {name} | not probed |  |  |  |  |  |")
        continue
    cb = ", ".join(f"{t:.2f}" for t in p.get("count_by_name_seconds") or [])
    print(f"| {name} | {p['names']:,} | {p['label_values_p50_seconds']*1e3:.1f} | {p['label_values_p99_seconds']*1e3:.1f} | {p['label_values_max_seconds']*1e3:.1f} | "
          f"{p.get('label_values_first_seconds', 0)*1e3:.1f} | {cb} |")
for name, r in rows.items():
    if r and r.get("first_error"):
        print(f"\n{name}: first non-2xx answer: {r['first_error'][:300]}")
EOF
