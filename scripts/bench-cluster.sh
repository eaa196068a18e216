#!/usr/bin/env bash
# Is a cluster as fast as one node? The same TSBS cpu-only data (HOSTS
# hosts every 10 s for HOURS hours, `strata bench ingest`) loaded into a
# fresh `strata standalone` and into a fresh cluster on the same machine
# (metasrv with its embedded etcd + 3 datanodes), one after the other, on
# each store of STORES (file:// and MinIO). Both get table `cpu` created
# with 3 regions first; the cluster's writes all go to datanode 1 (as the
# first measurement did). Each setup is flushed and compacted, its row
# count checked against the rows sent (a PromQL count and the regions'
# rows), then asked (`strata bench query`, RUNS times each, datanode 1 in
# the cluster; both setups up, each run asking one and then the other, the
# first turning from run to run, so that the machine's drift falls on
# both alike):
#
#   1 host, 1 h      max(max_over_time(cpu_usage_user{hostname=~"host_H"}[1m]))  step 1m
#   8 hosts, 1 h     the same with host_H|...|host_H+7                            step 1m
#   1 host, HOURS    the first, over the whole data                               step 1m
#
# (H another of 30 hosts spread over the data in each run; every host's
# answer is compared)
#   all hosts        avg(avg_over_time(cpu_usage_user[1h])) by (hostname)         step 1h
#   all hosts max    max(max_over_time(cpu_usage_user[1h]))                        step 1h
#   all hosts count  count(max_over_time(cpu_usage_user[1h]))                      step 1h
#   /api/v1/labels and /api/v1/label/hostname/values over the data's hours
#
# Prints, per store, ingest rows/s, the servers' CPU, the WAL segments they
# wrote (an object-store PUT each) and, on MinIO, MinIO's CPU, each query's
# p50 and p99, the cluster ÷ standalone ratio of each with the goal it has, and the
# bytes datanodes moved between them per query: strata_peer_grpc_bytes_total
# summed over the 3 datanodes, both directions (the gRPC messages of
# datanode-to-datanode calls: remote scans, label look-ups; their frames, not
# HTTP/2 framing, headers or TLS). The two setups' answers must be the same
# and their row counts what was sent: a difference prints FAIL instead of a
# ratio, and the script exits 1.
#
# With LOADS=N (default 1), each setup loads the data N times, on fresh
# servers and a fresh store each time, standalone and cluster in turn; the
# ingest figures are then the medians (the ratio the median of each
# turn's), with every load's figure beside them. A shared machine's speed
# drifts by more than a tenth from one load to the next; turns that
# alternate see the drift alike. Every load's rows are counted. Only the
# last load of each setup is flushed, compacted and queried.
#
# With SPREAD=1 (the default) the cluster's table is then dropped, created
# again and loaded once more with the requests spread over the 3 datanodes
# in turn, for a second ingest figure.
#
#   scripts/bench-cluster.sh                           # 400 hosts × 12 h (1.728M rows), file:// and MinIO
#   STORES=file HOSTS=100 HOURS=2 scripts/bench-cluster.sh
#   HOSTS=4000 HOURS=12 scripts/bench-cluster.sh       # the full size: 17.28M rows
#   WORKERS=12 NODE_FLAGS=--wal-window=0 scripts/bench-cluster.sh
#   DN_FLAGS=--wal-window=20ms scripts/bench-cluster.sh  # the datanodes' flags only
#   LOADS=5 SPREAD=0 RUNS=3 scripts/bench-cluster.sh   # ingest: medians of 5 alternating loads
#   HALT_POLL_NS=200000 scripts/bench-cluster.sh       # a KVM guest's halt polling at Linux's default, for the run
#   SERVER_GODEBUG= scripts/bench-cluster.sh           # the servers with Go's runtime defaults, not the image's GODEBUG
#
# A query in the cluster wakes processes that sat idle, and on a virtual
# machine waking an idle virtual CPU costs what its idle policy says: the
# script prints the machine's (cpuidle driver; a KVM guest's halt-polling
# window, guest_halt_poll_ns, 0 meaning an idle virtual CPU halts at once
# and is woken through the hypervisor). HALT_POLL_NS sets that window for
# the run and restores it at the end (root only; docs/performance.md, "A
# cluster against one node", has what it changes).
#
# Table cpu is partitioned by PARTITION (default hostname; PARTITION=
# routes by whole series) in both setups, as a TSBS user would declare
# it: a query naming hosts reads only their regions.
#
# Goals on the same cores (issue 39): ingest ≥ 0.8× standalone; point
# queries ≤ 1.5×; the all-host aggregations ≤ 1.2×. Needs MinIO for
# STORES=minio (scripts/test.sh installs it into ~/.cache/strata/bin; without
# it the MinIO runs are skipped with a note).
set -euo pipefail
cd "$(dirname "$0")/.."

HOSTS=${HOSTS:-400}
HOURS=${HOURS:-12}
STORES=${STORES:-file minio}
WORKERS=${WORKERS:-4}
BATCH=${BATCH:-10000}
RUNS=${RUNS:-30}
SPREAD=${SPREAD:-1}
LOADS=${LOADS:-1}
NODE_FLAGS=${NODE_FLAGS:-} # more flags for the standalone and each datanode, e.g. --wal-window=0
DN_FLAGS=${DN_FLAGS:-}     # more flags for each datanode only, e.g. --wal-window=20ms
# The servers' GODEBUG, both setups alike: by default the image's
# (docker/strata.Dockerfile: the Go scheduler's monitor kept out of its deep
# sleep, docs/configuration.md, "The runtime's monitor"); SERVER_GODEBUG=
# runs them with Go's defaults.
SERVER_GODEBUG=${SERVER_GODEBUG-$(sed -n 's/^ENV GODEBUG=//p' docker/strata.Dockerfile)}
PARTITION=${PARTITION-hostname} # table cpu's partition tag in both setups; PARTITION= routes by whole series
part=()
routing="routed by whole series"
if [ -n "$PARTITION" ]; then part=(--partition-by "$PARTITION") routing="partitioned by $PARTITION"; fi
START=${START:-2026-01-01T00:00:00Z}
ROWS=$((HOSTS * HOURS * 360))
if [ "$HOSTS" -lt 9 ] || [ "$HOURS" -lt 1 ]; then
	echo "HOSTS must be at least 9 (the 8-host query) and HOURS at least 1" >&2
	exit 2
fi

BIN=${STRATA_BIN_CACHE:-$HOME/.cache/strata/bin}
MINIO=${STRATA_MINIO_BIN:-$BIN/minio}
HALT_POLL_NS=${HALT_POLL_NS:-}
poll=/sys/module/haltpoll/parameters/guest_halt_poll_ns
poll_was=

work=$(mktemp -d)
pids=()
cleanup() {
	if [ -n "$poll_was" ]; then echo "$poll_was" >"$poll" || true; fi # first: nothing below may skip it
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

if [ -n "$HALT_POLL_NS" ]; then
	if ! [ -w "$poll" ]; then
		echo "HALT_POLL_NS: $poll is not there or not writable (not a KVM guest with cpuidle-haltpoll, or not root)" >&2
		exit 2
	fi
	poll_was=$(cat "$poll")
	echo "$HALT_POLL_NS" >"$poll"
fi
# idle: the machine's idle policy, as the header prints it.
idle() {
	local d
	d=$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo unknown)
	if [ -r "$poll" ]; then
		echo "cpuidle $d, guest_halt_poll_ns $(cat "$poll")"
	else
		echo "cpuidle $d"
	fi
}

echo "building strata, metasrv and datanode..."
for c in strata metasrv datanode; do
	go build -o "$work/$c" "./cmd/$c"
done
strata() { "$work/strata" "$@"; }

. scripts/net-lib.sh

# stop PID...: stop processes this script started and wait for them.
stop() {
	for p in "$@"; do kill "$p" 2>/dev/null || true; done
	for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

# retry N CMD...: run CMD until it succeeds, at most N times a second apart
# (a compaction refuses while a background one runs).
retry() {
	local n=$1 i out
	shift
	for i in $(seq 1 "$n"); do
		if out=$("$@" 2>&1); then
			echo "$out"
			return 0
		fi
		if [ "$i" = "$n" ]; then
			echo "$out" >&2
			return 1
		fi
		sleep 1 # waiting out a running compaction: no signal to wait on
	done
}

# metric_sum NAME URL...: unlabelled metric NAME summed over /metrics URLs.
metric_sum() {
	local n=$1 u
	shift
	for u in "$@"; do curl -fsS "$u" | awk -v n="$n" '$1 == n { print $2 }'; done | awk '{ s += $1 } END { printf "%.2f\n", s }'
}

# wal_since W0 URL...: the WAL segments (one object-store PUT each) written
# since metric_sum strata_wal_segments_total URL... said W0.
wal_since() {
	local w0=$1
	shift
	python3 -c 'import sys; print("%d" % (float(sys.argv[2]) - float(sys.argv[1])))' "$w0" "$(metric_sum strata_wal_segments_total "$@")"
}

# cpu_seconds URL...: process_cpu_seconds_total summed over /metrics URLs.
cpu_seconds() { metric_sum process_cpu_seconds_total "$@"; }

# cpu_since C0 URL...: the CPU seconds spent since cpu_seconds URL... said C0.
cpu_since() {
	local c0=$1
	shift
	python3 -c 'import sys; print("%.2f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$c0" "$(cpu_seconds "$@")"
}

epoch=$(python3 -c 'import datetime, sys; print(int(datetime.datetime.fromisoformat(sys.argv[1].replace("Z", "+00:00")).timestamp()))' "$START")
last=$((epoch + HOURS * 3600 - 10)) # the last rows' timestamp
hour_in=$((epoch + 3600))           # the first full hour's end
if [ "$hour_in" -gt "$last" ]; then hour_in=$last; fi
# The host queries take other hosts in turn, as TSBS's generator picks
# hosts at random: one host (or 8 in a row) from each of 30 places spread
# over the hosts, so a cluster's run meets hosts of every region.
ones=() eights=()
for ((k = 0; k < 30; k++)); do
	h=$(((1 + k * 37) % (HOSTS - 8)))
	ones+=("host_$h")
	eights+=("$(seq -f "host_%g" -s '|' "$h" $((h + 7)))")
done
one="one=$(IFS=,; echo "${ones[*]}")"
eight="eight=$(IFS=,; echo "${eights[*]}")"
# name;promql;start;end;step[;vary], or name;path
queries=(
	"1 host, 1 h;max(max_over_time(cpu_usage_user{hostname=~\"{one}\"}[1m]));$((last - 3600));$last;1m;$one"
	"8 hosts, 1 h;max(max_over_time(cpu_usage_user{hostname=~\"{eight}\"}[1m]));$((last - 3600));$last;1m;$eight"
	"1 host, all ${HOURS} h;max(max_over_time(cpu_usage_user{hostname=~\"{one}\"}[1m]));$epoch;$last;1m;$one"
	"all hosts hourly avg, ${HOURS} h;avg(avg_over_time(cpu_usage_user[1h])) by (hostname);$hour_in;$last;1h"
	"/api/v1/labels;/api/v1/labels?start=$epoch&end=$((last + 10))"
	"/api/v1/label/hostname/values;/api/v1/label/hostname/values?start=$epoch&end=$((last + 10))"
	"all hosts hourly max, ${HOURS} h;max(max_over_time(cpu_usage_user[1h]));$hour_in;$last;1h"
	"all hosts hourly count, ${HOURS} h;count(max_over_time(cpu_usage_user[1h]));$hour_in;$last;1h"
)

# proc_cpu PID: the CPU seconds process PID has spent.
proc_cpu() {
	awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f\n", ($14 + $15) / hz }' "/proc/$1/stat"
}

# ingest DIR URLS: load the data through URLS (comma-separated); writes
# DIR/ingest.txt, and MinIO's CPU seconds meanwhile to DIR/store-cpu if
# MinIO runs (it serves the WAL's PUTs of every node: its work is the
# servers' too).
ingest() {
	local m0=
	if [ -n "$mpid" ]; then m0=$(proc_cpu "$mpid"); fi
	strata bench ingest --url "$2" --hosts "$HOSTS" --rows "$ROWS" --batch "$BATCH" --workers "$WORKERS" --start "$START" >"$1/ingest.txt" 2>&1 || {
		cat "$1/ingest.txt" >&2
		return 1
	}
	grep -E 'throughput|CPU' "$1/ingest.txt" | sed 's/^/    /'
	if [ -n "$m0" ]; then python3 -c 'import sys; print("%.2f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$m0" "$(proc_cpu "$mpid")" >"$1/store-cpu"; fi
}

# count DIR URL SUFFIX: the rows the server holds, by a PromQL count of
# one field's samples; writes DIR/count-SUFFIX.json.
count() {
	strata bench query --url "$2" --promql "sum(count_over_time(cpu_usage_user[${HOURS}h]))" --end "$last" --runs 1 --warmup 1 \
		--answer "$1/count-$3.json" >/dev/null
}

# ask ST SA_DIR SA_URL CL_DIR CL_URL PEER_METRICS: every query, each run
# asking the standalone and the cluster in turn (`strata bench query`
# with both URLs), so that the machine's drift falls on both alike;
# writes DIR/q<i>.json (each setup's timing) and DIR/a<i>.json (its
# answer).
ask() {
	local st=$1 sd=$2 su=$3 cd=$4 cu=$5 peers=$6 i=0 q name rest expr qs qe step vary args
	for q in "${queries[@]}"; do
		name=${q%%;*}
		rest=${q#*;}
		if [[ $rest == /* ]]; then
			args=(--path "$rest")
		else
			IFS=';' read -r expr qs qe step vary <<<"$rest"
			args=(--promql "$expr" --start "$qs" --end "$qe" --step "$step")
			if [ -n "$vary" ]; then args+=(--vary "$vary"); fi
		fi
		strata bench query --url "$su,$cu" "${args[@]}" --peer-metrics "$peers" --runs "$RUNS" --warmup 2 \
			--answer "$sd/a$i.json,$cd/a$i.json" --json >"$work/$st/q$i.json"
		python3 - "$work/$st/q$i.json" "$sd/q$i.json" "$cd/q$i.json" "$name" <<'PY'
import json, sys
s, c = json.load(open(sys.argv[1]))
for k in ("peer_sent_bytes_per_query", "peer_received_bytes_per_query", "peer_bytes_per_query_by_method"):
    s.pop(k, None) # a run's, the cluster's: its report keeps them
json.dump(s, open(sys.argv[2], "w"))
json.dump(c, open(sys.argv[3], "w"))
print("    %-34s p50 %7.2f / %7.2f ms  p99 %7.2f / %7.2f ms" % (sys.argv[4], s["p50_seconds"] * 1e3, c["p50_seconds"] * 1e3, s["p99_seconds"] * 1e3, c["p99_seconds"] * 1e3))
PY
		i=$((i + 1))
	done
}

# regions STORE_DIR METASRV: the table's regions (owner, files, rows) as JSON.
regions() {
	strata cluster regions --table cpu -o json --metasrv "$2" >"$1/regions.json"
}

# standalone ST STORE_URL [N]: the standalone's turn on store ST; with N,
# load N of LOADS only (into DIR/standalone-loadN, the servers stopped
# after the load's rows are counted). The last turn leaves the standalone
# up (sa_dir, sa_url, sa_pid) for the cluster's turn to query both.
standalone() {
	local st=$1 store=$2 n=${3:-} dir="$work/$1/standalone" port gport pid url
	if [ -n "$n" ]; then dir="$work/$1/standalone-load$n"; fi
	mkdir -p "$dir"
	port=$(free_port)
	gport=$(free_port)
	echo "[$st] standalone: loading $ROWS rows ($HOSTS hosts × $HOURS h)${n:+, load $n of $LOADS}..."
	# The binary itself, not the strata function: $! of a function sent to
	# the background is a subshell's, which a kill ends without its child
	# (the standalone ran on through the cluster's turn).
	GODEBUG=$SERVER_GODEBUG "$work/strata" standalone --data-dir "$dir/data" --store "$store" --http-addr "127.0.0.1:$port" --grpc-addr "127.0.0.1:$gport" --log-level warn $NODE_FLAGS >"$dir/log" 2>&1 &
	pid=$!
	pids+=("$pid")
	url="http://127.0.0.1:$port"
	wait_http "$url/health"
	strata table create cpu --regions 3 "${part[@]}" --server "127.0.0.1:$gport" >/dev/null
	local c0 w0
	c0=$(cpu_seconds "$url/metrics")
	w0=$(metric_sum strata_wal_segments_total "$url/metrics")
	ingest "$dir" "$url"
	cpu_since "$c0" "$url/metrics" >"$dir/cpu"
	wal_since "$w0" "$url/metrics" >"$dir/wal"
	if [ -n "$n" ]; then
		count "$dir" "$url" load
		stop "$pid"
		return
	fi
	strata admin flush cpu --server "127.0.0.1:$gport" --timeout 0 >/dev/null
	retry 120 strata admin compact cpu --all --server "127.0.0.1:$gport" --timeout 0 >"$dir/compact.txt"
	regions "$dir" "127.0.0.1:$gport"
	count "$dir" "$url" load
	# Left up for the queries, which ask it and the cluster in turn.
	sa_dir=$dir sa_url=$url sa_pid=$pid
}

# cluster ST STORE_URL [N]: the cluster's turn on store ST; with N, load N
# of LOADS only, as standalone's. The last turn runs the queries against
# both setups (the standalone left up by its turn), then stops the
# standalone.
cluster() {
	local st=$1 store=$2 n=${3:-} dir="$work/$1/cluster" etcd mg mh meta i
	if [ -n "$n" ]; then dir="$work/$1/cluster-load$n"; fi
	local -a dpids=() http=() grpc=()
	mkdir -p "$dir"
	etcd=$(free_port)
	mg=$(free_port)
	mh=$(free_port)
	echo "[$st] cluster: metasrv + 3 datanodes; loading $ROWS rows through datanode 1${n:+, load $n of $LOADS}..."
	GODEBUG=$SERVER_GODEBUG "$work/metasrv" --data-dir "$dir/meta" --etcd-client-addr "127.0.0.1:$etcd" --grpc-addr "127.0.0.1:$mg" --http-addr "127.0.0.1:$mh" \
		--store "$store" --default-regions 3 --final-sweep-after 1s --log-level warn >"$dir/metasrv.log" 2>&1 &
	meta=$!
	pids+=("$meta")
	wait_http "http://127.0.0.1:$mh/health"
	for i in 1 2 3; do
		http+=("$(free_port)")
		grpc+=("$(free_port)")
		GODEBUG=$SERVER_GODEBUG "$work/datanode" --id "dn$i" --etcd-endpoints "http://127.0.0.1:$etcd" --store "$store" --data-dir "$dir/dn$i" \
			--grpc-addr "127.0.0.1:${grpc[$((i - 1))]}" --http-addr "127.0.0.1:${http[$((i - 1))]}" --default-regions 3 --log-level warn $NODE_FLAGS $DN_FLAGS >"$dir/dn$i.log" 2>&1 &
		dpids+=($!)
		pids+=($!)
	done
	local -a urls=() metrics=()
	for i in 0 1 2; do
		urls+=("http://127.0.0.1:${http[$i]}")
		metrics+=("http://127.0.0.1:${http[$i]}/metrics")
		wait_http "${urls[$i]}/health"
	done
	wait_datanodes "127.0.0.1:$mg"
	create_table "127.0.0.1:$mg"
	local c0 w0
	c0=$(cpu_seconds "${metrics[@]}" "http://127.0.0.1:$mh/metrics")
	w0=$(metric_sum strata_wal_segments_total "${metrics[@]}")
	ingest "$dir" "${urls[0]}"
	cpu_since "$c0" "${metrics[@]}" "http://127.0.0.1:$mh/metrics" >"$dir/cpu"
	wal_since "$w0" "${metrics[@]}" >"$dir/wal"
	if [ -n "$n" ]; then
		count "$dir" "${urls[0]}" load
		stop "${dpids[@]}" "$meta"
		return
	fi
	for i in 0 1 2; do strata admin flush cpu --server "127.0.0.1:${grpc[$i]}" --timeout 0 >/dev/null; done
	retry 120 strata cluster compact cpu --all --metasrv "127.0.0.1:$mg" --timeout 0 >"$dir/compact.txt"
	regions "$dir" "127.0.0.1:$mg"
	count "$dir" "${urls[0]}" load
	echo "[$st] queries, $RUNS runs each, every run asking the standalone and then datanode 1 or the other way round (p50, p99: standalone / cluster)..."
	ask "$st" "$sa_dir" "$sa_url" "$dir" "${urls[0]}" "$(
		IFS=,
		echo "${metrics[*]}"
	)"
	stop "$sa_pid"
	if [ "$SPREAD" = 1 ]; then
		echo "[$st] cluster: table dropped and created again; loading $ROWS rows spread over the 3 datanodes..."
		mkdir -p "$dir/spread"
		strata cluster drop-table cpu --metasrv "127.0.0.1:$mg" >/dev/null
		create_table "127.0.0.1:$mg"
		c0=$(cpu_seconds "${metrics[@]}" "http://127.0.0.1:$mh/metrics")
		w0=$(metric_sum strata_wal_segments_total "${metrics[@]}")
		ingest "$dir/spread" "$(
			IFS=,
			echo "${urls[*]}"
		)"
		cpu_since "$c0" "${metrics[@]}" "http://127.0.0.1:$mh/metrics" >"$dir/spread/cpu"
		wal_since "$w0" "${metrics[@]}" >"$dir/spread/wal"
		count "$dir" "${urls[1]}" spread
	fi
	stop "${dpids[@]}" "$meta"
}

# wait_datanodes METASRV: until metasrv lists 3 live datanodes (so the
# table's regions are spread over them).
wait_datanodes() {
	for _ in $(seq 1 300); do
		if [ "$(strata cluster status --metasrv "$1" 2>/dev/null | grep -cE '^dn[123] ')" = 3 ]; then return 0; fi
		sleep 0.2 # polling the cluster's view: no signal to wait on
	done
	echo "metasrv did not list 3 datanodes" >&2
	strata cluster status --metasrv "$1" >&2 || true
	return 1
}

# create_table METASRV: table cpu with 3 regions, waited for until every
# region has a live owner.
create_table() {
	strata cluster create-table cpu --regions 3 "${part[@]}" --metasrv "$1" >/dev/null
	for _ in $(seq 1 300); do
		if [ "$(strata cluster status --metasrv "$1" 2>/dev/null | awk '$2 == "cpu" && $NF == "live"' | wc -l)" = 3 ]; then
			echo "    regions: $(strata cluster status --metasrv "$1" | awk '$2 == "cpu" { printf "%s on %s; ", $1, $3 }')"
			return 0
		fi
		sleep 0.2 # polling the cluster's view: no signal to wait on
	done
	echo "table cpu's regions did not all get a live owner" >&2
	strata cluster status --metasrv "$1" >&2 || true
	return 1
}

stores=()
for st in $STORES; do
	case $st in
	file) ;;
	minio)
		if [ ! -x "$MINIO" ]; then
			echo "no MinIO at $MINIO (scripts/test.sh installs it, or set STRATA_MINIO_BIN): skipping the MinIO runs" >&2
			continue
		fi
		;;
	*)
		echo "STORES: unknown store $st (want file and/or minio)" >&2
		exit 2
		;;
	esac
	stores+=("$st")
done

mport=
mpid=
if [[ " ${stores[*]} " == *" minio "* ]]; then
	export AWS_ACCESS_KEY_ID=strata-bench AWS_SECRET_ACCESS_KEY=strata-bench-secret AWS_REGION=us-east-1
	mport=$(free_port)
	# MinIO's drive is a directory of its own: it was $work/minio, under
	# which the MinIO turn's servers keep their data directories (etcd's
	# included), and MinIO's scanner crawled them: 7% of a core, idle,
	# after five loads, against 0.4% now.
	MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY MINIO_BROWSER=off \
		"$MINIO" server --quiet --address "127.0.0.1:$mport" --console-address "127.0.0.1:$(free_port)" "$work/minio-drive" >"$work/minio.log" 2>&1 &
	mpid=$!
	pids+=("$mpid")
	wait_http "http://127.0.0.1:$mport/minio/health/ready"
fi

# store_url ST NAME: a fresh store for one setup.
store_url() {
	if [ "$1" = file ]; then
		mkdir -p "$work/$1/$2-store"
		echo "file://$work/$1/$2-store"
	else
		local s="s3://bench-$2-$RANDOM$RANDOM?endpoint=http%3A%2F%2F127.0.0.1%3A$mport&use_path_style=true&region=us-east-1"
		strata store init --store "$s" >/dev/null
		echo "$s"
	fi
}

echo "data: $ROWS rows, $HOSTS hosts × $HOURS h from $START; $WORKERS workers × $BATCH-row requests; $RUNS runs a query; table cpu in 3 regions, $routing; $(nproc) cores; $(idle); servers' GODEBUG ${SERVER_GODEBUG:-none}"
for st in "${stores[@]}"; do
	for n in $(seq 2 "$LOADS"); do
		standalone "$st" "$(store_url "$st" "standalone-load$n")" "$n"
		cluster "$st" "$(store_url "$st" "cluster-load$n")" "$n"
	done
	standalone "$st" "$(store_url "$st" standalone)"
	cluster "$st" "$(store_url "$st" cluster)"
done

printf '%s\n' "${queries[@]}" >"$work/queries"
python3 - "$work" "$ROWS" "$SPREAD" "$LOADS" "${stores[@]}" <<'EOF'
import json, math, os, statistics, sys

work, rows, spread, loads, stores = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4]), sys.argv[5:]
names = [l.split(";", 1)[0] for l in open(os.path.join(work, "queries")).read().splitlines()]
failed = False

def load(path):
    with open(path) as f:
        return json.load(f)

def rate(d):
    for line in open(os.path.join(d, "ingest.txt")):
        if line.startswith("throughput:"):
            return float(line.split()[1])
    return float("nan")

def cpu(d):
    return float(open(os.path.join(d, "cpu")).read())

def wal(d):
    return int(open(os.path.join(d, "wal")).read())

def store_cpu(d):
    """MinIO's CPU seconds during d's load (None: no MinIO)."""
    p = os.path.join(d, "store-cpu")
    return float(open(p).read()) if os.path.exists(p) else None

def counted(d, suffix):
    """The rows a PromQL count found (sum over the answer's one sample)."""
    r = load(os.path.join(d, f"count-{suffix}.json"))["data"]["result"]
    return int(float(r[0]["value"][1])) if r else 0

def region_rows(d):
    return sum(int(r.get("rows", 0)) for r in load(os.path.join(d, "regions.json")))

def canon(a):
    """An answer in a form two servers' can be compared in: series sorted
    by labels, values as floats (labels: the sorted list)."""
    d = a["data"]
    if isinstance(d, list):
        return sorted(d)
    out = []
    for s in d["result"]:
        vals = s.get("values") or [s.get("value")]
        out.append((sorted(s["metric"].items()), [(t, float(v)) for t, v in vals]))
    return sorted(out)

def same(a, b):
    if isinstance(a, list) and a and not isinstance(a[0], tuple):
        return a == b
    if len(a) != len(b):
        return False
    for (la, va), (lb, vb) in zip(a, b):
        if la != lb or len(va) != len(vb):
            return False
        for (ta, xa), (tb, xb) in zip(va, vb):
            if ta != tb or not (xa == xb or (math.isnan(xa) and math.isnan(xb)) or math.isclose(xa, xb, rel_tol=1e-9)):
                return False
    return True

def diff_note(a, b):
    if isinstance(a, list) and a and not isinstance(a[0], tuple):
        return f"{len(a)} against {len(b)} values"
    if len(a) != len(b):
        return f"{len(a)} against {len(b)} series"
    for x, y in zip(a, b):
        if not same([x], [y]):
            return "first at " + ",".join(f"{k}={v}" for k, v in x[0])
    return "?"

goals = {0: 1.5, 1: 1.5, 2: 1.5, 3: 1.2, 6: 1.2, 7: 1.2}
for st in stores:
    sd, cd = os.path.join(work, st, "standalone"), os.path.join(work, st, "cluster")
    print()
    print(f"### {'file://' if st == 'file' else 'MinIO'}: standalone against metasrv + 3 datanodes, {rows:,} rows")
    print()
    print("| measure | standalone | cluster | cluster ÷ standalone | goal | bytes between datanodes a query |")
    print("| --- | --- | --- | --- | --- | --- |")
    s_rows, c_rows = counted(sd, "load"), counted(cd, "load")
    s_reg, c_reg = region_rows(sd), region_rows(cd)
    ok = s_rows == rows and c_rows == rows and s_reg == rows and c_reg == rows
    # Every load, in turn: the extra ones (counted too), then the last.
    s_dirs = [os.path.join(work, st, f"standalone-load{n}") for n in range(2, loads + 1)] + [sd]
    c_dirs = [os.path.join(work, st, f"cluster-load{n}") for n in range(2, loads + 1)] + [cd]
    bad = [f"{os.path.basename(d)} {counted(d, 'load'):,}" for d in s_dirs[:-1] + c_dirs[:-1] if counted(d, "load") != rows]
    ok = ok and not bad
    s_rates, c_rates = [rate(d) for d in s_dirs], [rate(d) for d in c_dirs]
    s_rate, c_rate = statistics.median(s_rates), statistics.median(c_rates)
    if ok:
        r = statistics.median(c / s for s, c in zip(s_rates, c_rates))
        ratio, met = f"**{r:.2f}**", ("met" if r >= 0.8 else "NOT met")
    else:
        failed = True
        ratio, met = (f"FAIL: rows counted {s_rows:,} (regions {s_reg:,}) and {c_rows:,} (regions {c_reg:,})"
                      f"{''.join(', ' + b for b in bad)}, sent {rows:,}"), ""
    print(f"| ingest rows/s, cluster's to datanode 1 | {s_rate:,.0f} | {c_rate:,.0f} | {ratio} | ≥ 0.8 {met} |  |")
    if loads > 1:
        each = "; ".join(f"{s:,.0f} / {c:,.0f} ({c / s:.2f})" for s, c in zip(s_rates, c_rates))
        print(f"| ingest, each load in turn (standalone / cluster) | {each} |  |  |  |  |")
    print(f"| ingest: servers' CPU s (cluster: 3 datanodes + metasrv) | {cpu(sd):.1f} | {cpu(cd):.1f} | {cpu(cd) / cpu(sd):.2f} |  |  |")
    print(f"| ingest: WAL segments written (a PUT each) | {wal(sd):,} | {wal(cd):,} | {wal(cd) / max(wal(sd), 1):.2f} |  |  |")
    if st == "minio" and store_cpu(sd) is not None:
        print(f"| ingest: MinIO's CPU s | {store_cpu(sd):.1f} | {store_cpu(cd):.1f} | {store_cpu(cd) / store_cpu(sd):.2f} |  |  |")
    sp = os.path.join(cd, "spread")
    if spread and os.path.exists(os.path.join(sp, "ingest.txt")):
        sr = counted(cd, "spread")
        p_rate = rate(sp)
        if sr == rows:
            ratio = f"{p_rate / s_rate:.2f}"
        else:
            failed = True
            ratio = f"FAIL: rows counted {sr:,}, sent {rows:,}"
        print(f"| ingest rows/s, cluster's spread over 3 datanodes | {s_rate:,.0f} | {p_rate:,.0f} | {ratio} |  |  |")
        print(f"| ingest spread: servers' CPU s | {cpu(sd):.1f} | {cpu(sp):.1f} | {cpu(sp) / cpu(sd):.2f} |  |  |")
        print(f"| ingest spread: WAL segments written | {wal(sd):,} | {wal(sp):,} | {wal(sp) / max(wal(sd), 1):.2f} |  |  |")
        if st == "minio" and store_cpu(sd) is not None:
            print(f"| ingest spread: MinIO's CPU s | {store_cpu(sd):.1f} | {store_cpu(sp):.1f} | {store_cpu(sp) / store_cpu(sd):.2f} |  |  |")
    methods = {}
    for i, name in enumerate(names):
        sq, cq = load(os.path.join(sd, f"q{i}.json")), load(os.path.join(cd, f"q{i}.json"))
        # Every answer: a query that takes hosts in turn wrote one a host
        # (a{i}.json, a{i}.json.1, ...); the first that differs counts.
        sa, ca = canon(load(os.path.join(sd, f"a{i}.json"))), canon(load(os.path.join(cd, f"a{i}.json")))
        empty = not sa
        k = 1
        while same(sa, ca) and os.path.exists(os.path.join(sd, f"a{i}.json.{k}")):
            sa, ca = canon(load(os.path.join(sd, f"a{i}.json.{k}"))), canon(load(os.path.join(cd, f"a{i}.json.{k}")))
            k += 1
        moved = (cq.get("peer_sent_bytes_per_query") or 0) + (cq.get("peer_received_bytes_per_query") or 0)
        for m, v in (cq.get("peer_bytes_per_query_by_method") or {}).items():
            methods.setdefault(i, {})[m] = v
        for p in ("p50", "p99"):
            s, c = sq[p + "_seconds"], cq[p + "_seconds"]
            if not same(sa, ca):
                failed = True
                ratio, met = f"FAIL: the answers differ ({diff_note(sa, ca)})", ""
            elif empty:
                failed = True
                ratio, met = "FAIL: empty answers", ""
            else:
                r = c / s
                ratio = f"**{r:.2f}**" if p == "p50" else f"{r:.2f}"
                g = goals.get(i)
                met = f"≤ {g} {'met' if r <= g else 'NOT met'}" if g and p == "p50" else ""
            kib = f"{moved / 1024:,.1f} KiB" if p == "p50" else ""
            print(f"| {name} {p} | {s * 1e3:.2f} ms | {c * 1e3:.2f} ms | {ratio} | {met} | {kib} |")
    print()
    print("Bytes between datanodes a query, by gRPC method (sent + received, summed over the datanodes):")
    for i, ms in sorted(methods.items()):
        print(f"  {names[i]}: " + ", ".join(f"{m.rsplit('/', 1)[-1]} {v / 1024:,.1f} KiB" for m, v in sorted(ms.items())))
    regs = load(os.path.join(cd, "regions.json"))
    print("Cluster regions after compaction: " + "; ".join(f"{r['region']} on {r.get('owner', '?')}: {r.get('files', 0)} files, {int(r.get('rows', 0)):,} rows, {int(r.get('bytes', 0)) / 2**20:.1f} MiB" for r in regs))
sys.exit(1 if failed else 0)
EOF
