#!/usr/bin/env bash
# Bytes a sample side by side: the same TSBS cpu-only data (HOSTS hosts ×
# HOURS hours, ten fields a row every 10 s; integers as TSBS writes them, or
# two-decimal floats with INTS=0) loaded by `strata bench ingest` into a
# fresh VictoriaMetrics v1.151.0 and a fresh `strata standalone` on
# file://. The loader counts every series and sample back through each
# server's /api/v1/query and fails the script if one is missing. Prints
# bytes a sample (a row's field):
#
#   Strata:          flushed (strata_flush_bytes_total after `strata admin
#                    flush`), compacted (`strata admin compact --all`'s
#                    outputs), and the store's total (du) right after the
#                    load and after the flush
#   VictoriaMetrics: its data directory (du, the server stopped) right
#                    after the load, and after /internal/force_merge once
#                    its merges are done; samples (data/small and data/big)
#                    and index (data/indexdb) apart
#
#   scripts/bench-bytes.sh                    # 400 hosts × 12 h, integers
#   HOSTS=4000 HOURS=12 scripts/bench-bytes.sh
#
# Installs VictoriaMetrics into ~/.cache/strata/bin the first time
# (scripts/peers-lib.sh). docs/performance.md, "Bytes a sample".
set -euo pipefail
cd "$(dirname "$0")/.."

HOSTS=${HOSTS:-400}
HOURS=${HOURS:-12}
INTS=${INTS:-1}
WORKERS=${WORKERS:-4}
BATCH=${BATCH:-10000}
ROWS=$((HOSTS * HOURS * 360))
SAMPLES=$((ROWS * 10))
ints=()
values="two-decimal floats"
if [ "$INTS" = 1 ]; then
	ints=(--ints)
	values="integers (TSBS)"
fi
. scripts/peers-lib.sh

load() { # url log
	"$work/strata" bench ingest --url "$1" --hosts "$HOSTS" --rows "$ROWS" --batch "$BATCH" --workers "$WORKERS" "${ints[@]}" --verify-timeout 10m >"$2" 2>&1 || {
		cat "$2" >&2
		return 1
	}
	grep -E '^(rows|verify):' "$2" | sed 's/^/  /'
}
bytes() { du -sb "$1" | cut -f1; }
per() { python3 -c "print(f'{$1 / $SAMPLES:.3f}')"; }

echo "data: $values; $HOSTS hosts × $HOURS h = $ROWS rows, $SAMPLES samples"

# VictoriaMetrics. Rows stamped from 2026-01-01 are past its default
# retention (1 month), which drops them silently: -retentionPeriod 100y.
# Sizes are taken with the server stopped (SIGTERM: it writes what it
# holds in memory and ends its merges' files), once after the load, and
# once after a restart, /internal/force_merge and its merges' end.
echo "VictoriaMetrics v1.151.0:"
port=$(free_port)
vmdir="$work/vm"
vm="http://127.0.0.1:$port"
vmpid=
vm_start() {
	"$BIN/victoria-metrics" -storageDataPath "$vmdir" -httpListenAddr "127.0.0.1:$port" -loggerLevel ERROR -retentionPeriod 100y >>"$work/vm.log" 2>&1 &
	vmpid=$!
	pids+=("$vmpid")
	wait_http "$vm/health"
}
vm_stop() {
	kill "$vmpid"
	wait "$vmpid" 2>/dev/null || true
}
vm_start
load "$vm" "$work/vm-bench.txt"
vm_stop
vm_load=$(bytes "$vmdir")
vm_load_data=$(($(bytes "$vmdir/data/small") + $(bytes "$vmdir/data/big")))
vm_load_index=$(bytes "$vmdir/data/indexdb")
vm_start
curl -fsS "$vm/internal/force_merge?partition_prefix=2026_01" >/dev/null # the loader's rows start 2026-01-01
# Merges run in the background: wait until none is active and the size
# holds still (a merge has no completion signal but its metrics).
prev=0
for _ in $(seq 1 600); do
	sleep 2 # polling a process we started: no signal exists
	active=$(curl -fsS "$vm/metrics" | awk '/^vm_active_merges/ { s += $2 } END { print s + 0 }')
	now=$(bytes "$vmdir")
	if [ "$active" = 0 ] && [ "$now" = "$prev" ]; then break; fi
	prev=$now
done
vm_stop
vm_merged=$(bytes "$vmdir")
vm_merged_data=$(($(bytes "$vmdir/data/small") + $(bytes "$vmdir/data/big")))
vm_merged_index=$(bytes "$vmdir/data/indexdb")

# Strata standalone on file://.
echo "Strata standalone (file://):"
hport=$(free_port)
gport=$(free_port)
sdir="$work/strata-data"
mkdir -p "$sdir/store"
"$work/strata" standalone --data-dir "$sdir" --store "file://$sdir/store" --http-addr "127.0.0.1:$hport" --grpc-addr "127.0.0.1:$gport" --log-level warn >"$work/strata.log" 2>&1 &
spid=$!
pids+=("$spid")
st="http://127.0.0.1:$hport"
wait_http "$st/health"
load "$st" "$work/strata-bench.txt"
s_load=$(bytes "$sdir/store")
"$work/strata" admin --server "127.0.0.1:$gport" --timeout 10m flush cpu >/dev/null
s_flushed=$(curl -fsS "$st/metrics" | awk '/^strata_flush_bytes_total/ { s += $2 } END { printf "%d", s }')
s_store=$(bytes "$sdir/store")
out=$("$work/strata" admin --server "127.0.0.1:$gport" --timeout 30m compact cpu --all)
echo "  $out"
s_compacted=$(echo "$out" | sed -n 's/.* into [0-9]* (\([0-9]*\) bytes.*/\1/p')
if [ -z "$s_compacted" ]; then # one file: nothing to compact (small runs), it is the compacted file
	s_compacted=$(find "$sdir/store" -name '*.parquet' -printf '%s\n' | awk '{ s += $1 } END { printf "%d", s }')
fi
kill "$spid"
wait "$spid" 2>/dev/null || true

echo
echo "bytes a sample ($values, $HOSTS hosts × $HOURS h, $SAMPLES samples):"
echo "| server | what | bytes | bytes a sample |"
echo "| --- | --- | --- | --- |"
echo "| Strata | flushed SSTs (strata_flush_bytes_total) | $s_flushed | $(per "$s_flushed") |"
echo "| Strata | compacted SSTs (admin compact --all) | $s_compacted | **$(per "$s_compacted")** |"
echo "| Strata | store right after the load (SSTs, indexes, WAL, manifest) | $s_load | $(per "$s_load") |"
echo "| Strata | store after the flush | $s_store | $(per "$s_store") |"
echo "| VictoriaMetrics | data dir after the load: samples $vm_load_data, index $vm_load_index | $vm_load | $(per "$vm_load") (samples $(per "$vm_load_data")) |"
echo "| VictoriaMetrics | data dir after force_merge: samples $vm_merged_data, index $vm_merged_index | $vm_merged | **$(per "$vm_merged")** (samples $(per "$vm_merged_data")) |"
