#!/usr/bin/env bash
# bench-ab.sh: compare a benchmark between two git revisions on a noisy
# machine, by building both and running them in turns (A B A B ...), so that
# drift in the machine's speed hits both alike. Prints, per revision and
# sub-benchmark, the median and range of each metric.
#
#   scripts/bench-ab.sh [-n runs] [-p package] [-b bench] REV_A REV_B
#   scripts/bench-ab.sh -n 5 -p ./internal/compact -b Compaction d2007de HEAD
#
# Each run is one `go test -bench` invocation with -benchtime 1x (override
# with BENCHTIME). Environment variables (STRATA_BENCH_COMPACT_MB, ...) pass
# through.
set -euo pipefail

runs=5 pkg=./internal/compact bench=Compaction
while getopts "n:p:b:" o; do
	case $o in
	n) runs=$OPTARG ;;
	p) pkg=$OPTARG ;;
	b) bench=$OPTARG ;;
	*) sed -n '2,12p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { sed -n '2,12p' "$0"; exit 2; }

root=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/a" 2>/dev/null || true; git -C "$root" worktree remove --force "$work/b" 2>/dev/null || true; rm -rf "$work"' EXIT

build() { # name rev
	git -C "$root" worktree add -q --detach "$work/$1" "$2"
	(cd "$work/$1" && go test -c -o "$work/$1.test" "$pkg")
	echo "$1 = $2 ($(git -C "$root" rev-parse --short "$2"))"
}
build a "$1"
build b "$2"

for i in $(seq "$runs"); do
	for side in a b; do
		# The test binary runs in its package directory, as go test does.
		(cd "$work/$side/$pkg" && "$work/$side.test" -test.run '^$' -test.bench "$bench" -test.benchtime "${BENCHTIME:-1x}") |
			awk -v side="$side" '/^Benchmark/ { for (i = 3; i < NF; i += 2) print side, $1, $(i+1), $i }'
	done
done >"$work/results"

# side bench unit value -> median [min-max] per (side, bench, unit)
sort -k1,1 -k2,2 -k3,3 -k4,4g "$work/results" | awk '
	function flush() {
		if (key == "") return
		m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
		printf "%-3s %-40s %-16s median %-12g [%g .. %g] n=%d\n", s, b, u, m, v[1], v[n], n
	}
	{ k = $1 " " $2 " " $3; if (k != key) { flush(); key = k; n = 0; s = $1; b = $2; u = $3 } v[++n] = $4 }
	END { flush() }' | sort -k2,2 -k3,3 -k1,1
