#!/usr/bin/env bash
# engine-compare.sh: BenchmarkEngineCompare (internal/prom/engine_compare_test.go),
# Prometheus' engine as Strata runs it against the Thanos PromQL engine
# (github.com/thanos-io/promql-engine) over the same Queryable
# (docs/design-decisions.md, "Distributing PromQL: the engine and the pushdown").
#
#   scripts/engine-compare.sh [go test flags...]
#   STRATA_COMPARE_HOSTS=1000 STRATA_COMPARE_ROUNDS=3 scripts/engine-compare.sh -test.benchtime 5x
#
# Strata does not depend on the Thanos engine: this adds it to go.mod for
# the run only, from a copy of the module patched to build with the
# Prometheus version Strata pins (scripts/thanos-promql-engine-v0.316.patch),
# and puts go.mod and go.sum back afterwards.
set -euo pipefail

version=v0.0.0-20260513095632-c5f6038078e3
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
cp go.mod go.sum "$tmp/"
trap 'cp "$tmp/go.mod" "$tmp/go.sum" "$root/"; chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT

go mod download github.com/thanos-io/promql-engine@$version
src=$(go mod download -json github.com/thanos-io/promql-engine@$version | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
cp -r "$src" "$tmp/promql-engine"
chmod -R u+w "$tmp/promql-engine"
patch -s -d "$tmp/promql-engine" -p0 < scripts/thanos-promql-engine-v0.316.patch
go mod edit -require github.com/thanos-io/promql-engine@$version \
	-replace github.com/thanos-io/promql-engine="$tmp/promql-engine"
go mod tidy >/dev/null 2>&1 || go get github.com/thanos-io/promql-engine/engine@$version
uptime
STRATA_ENGINE_COMPARE=1 go test -tags enginecompare -run '^$' -bench EngineCompare -benchtime 5x ./internal/prom -v "$@" |
	grep -v '^=== RUN'
uptime
