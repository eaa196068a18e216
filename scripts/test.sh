#!/usr/bin/env bash
# The project's test command: installs what the tests need, then runs them.
#   - MinIO: built once with `go install` into ~/.cache/strata/bin (about 5
#     minutes on 2 cores the first time), so the S3 acceptance suite runs
#     against a real server. STRATA_REQUIRE_S3=1 turns a missing MinIO into a
#     failure instead of a skip.
set -euo pipefail
cd "$(dirname "$0")/.."

MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
BIN_DIR="${STRATA_CACHE_DIR:-$HOME/.cache/strata}/bin"
export STRATA_MINIO_BIN="${STRATA_MINIO_BIN:-$BIN_DIR/minio}"
if [ ! -x "$STRATA_MINIO_BIN" ]; then
  echo "installing MinIO $MINIO_VERSION into $BIN_DIR (first run only)..."
  mkdir -p "$BIN_DIR"
  GOBIN="$BIN_DIR" GOFLAGS=-buildvcs=false go install "github.com/minio/minio@$MINIO_VERSION"
fi
export STRATA_REQUIRE_S3=1

# A real Prometheus (scraping itself and a node_exporter) remote-writes to
# Strata and VictoriaMetrics side by side (internal/scrapetest): all three
# built once with `go install` into the same cache (about 8 minutes on 2
# cores the first time).
install() { # name binary module@version
  if [ ! -x "$BIN_DIR/$2" ]; then
    echo "installing $1 into $BIN_DIR (first run only)..."
    GOBIN="$BIN_DIR" GOFLAGS=-buildvcs=false go install "$3"
  fi
}
install Prometheus prometheus github.com/prometheus/prometheus/cmd/prometheus@v0.316.0
install node_exporter node_exporter github.com/prometheus/node_exporter@v1.12.1
install VictoriaMetrics victoria-metrics github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@v1.151.0
# A real Alertmanager receives the alerts of Strata's rules
# (internal/rules): v0.31.1, the newest whose module `go install` builds
# (later ones embed a web UI their module does not hold).
install Alertmanager alertmanager github.com/prometheus/alertmanager/cmd/alertmanager@v0.31.1
# golangci-lint (.golangci.yml; docs/design-decisions.md, "Lint"), built
# the same way (about 2 minutes the first time).
install golangci-lint golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
export STRATA_PROMETHEUS_BIN="$BIN_DIR/prometheus" STRATA_NODE_EXPORTER_BIN="$BIN_DIR/node_exporter" STRATA_VM_BIN="$BIN_DIR/victoria-metrics"
export STRATA_ALERTMANAGER_BIN="$BIN_DIR/alertmanager" STRATA_REQUIRE_ALERTMANAGER=1
export STRATA_REQUIRE_PROMETHEUS=1

# etcd: metasrv embeds it, but the integration suite also runs once against
# Debian's etcd-server. Installed with apt where that is possible (root and
# apt-get); elsewhere that one test falls back to the embedded etcd.
if ! command -v etcd >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing etcd-server with apt (first run only)..."
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null 2>&1 || echo "etcd-server not installed; the external-etcd run uses the embedded one"
  fi
fi
if command -v etcd >/dev/null 2>&1; then
  export STRATA_REQUIRE_ETCD=1
fi

# Chromium: the web UI's browser tests (internal/ui) drive Debian's
# headless Chromium; installed with apt as etcd-server is, and required
# here (STRATA_REQUIRE_CHROMIUM=1 turns a missing one into a failure).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing chromium with apt (first run only)..."
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || echo "chromium not installed: the browser tests will fail"
  fi
fi
export STRATA_REQUIRE_CHROMIUM=1

# Docker: the container suite (internal/composetest) runs the compose
# cluster wherever a daemon answers; here a missing one is then a failure.
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  export STRATA_REQUIRE_DOCKER=1
fi

echo "go vet ./..."
# internal/prom implements Prometheus' chunkenc.Iterator, whose Seek(int64)
# ValueType is not io.Seeker's: vet's stdmethods check is off there alone.
go vet $(go list ./... | grep -v '/internal/prom$')
go vet -stdmethods=false ./internal/prom
# As built, with cgo (the default): the cgo files (internal/sst/zstd_cgo.go)
# are linted; the nocgo build is compiled below.
echo "golangci-lint run ./..."
"$BIN_DIR/golangci-lint" run ./...
# SSTs are compressed with libzstd through cgo; without cgo a pure-Go
# encoder takes its place (internal/sst/zstd_nocgo.go). Keep that build
# compiling and its files readable.
echo "CGO_ENABLED=0: go build ./... and go test ./internal/sst/..."
CGO_ENABLED=0 go build ./...
CGO_ENABLED=0 go test -count=1 ./internal/sst/...
# The compaction fault campaign's summary line, which go test prints only
# with -v (the campaign runs again, about 10 s, in the full run below).
if [ -z "${STRATA_TEST_PKGS:-}" ]; then
  echo "go test -run TestFaultCampaign ./internal/compact"
  go test -count=1 -run '^TestFaultCampaign$' -v ./internal/compact | grep -E '^(fault campaign:|--- FAIL|FAIL|ok)'
  echo "go test -run TestOwnershipCampaign ./internal/gc"
  go test -count=1 -run '^TestOwnershipCampaign$' -v ./internal/gc | grep -E '^(ownership campaign:|--- FAIL|FAIL|ok)'
  if [ "${STRATA_REQUIRE_DOCKER:-}" = 1 ]; then
    # The container suite, alone (it builds images and runs 9 containers);
    # its figures and summary line are printed.
    echo "go test -run TestCompose ./internal/composetest"
    log="$(mktemp)"
    if ! go test -count=1 -timeout 20m -run '^TestCompose$' -v ./internal/composetest >"$log" 2>&1; then
      tail -n 300 "$log"
      exit 1
    fi
    grep -E '^(compose chaos:|    compose_test.go:[0-9]+: (healthy|partition|pause|kill|rolling|fsck|read back)|ok)' "$log"
    rm -f "$log"
  fi
fi
echo "go test ./..."
# STRATA_TEST_PKGS narrows the packages (make integration).
# The container suite ran above; skip it in the full run (-skip).
go test -count=1 -timeout 40m -skip '^TestCompose$' ${STRATA_TEST_PKGS:-./...} "$@"
