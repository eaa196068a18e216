# Sourced by the side-by-side benchmarks (bench-peers.sh,
# bench-remote-write.sh): VictoriaMetrics in the binary cache, a work
# directory whose processes stop at exit, this checkout's strata built
# there, and helpers to start servers. Sets BIN, MINIO, work and pids.

BIN=${STRATA_BIN_CACHE:-$HOME/.cache/strata/bin}
mkdir -p "$BIN"

vm_install='github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@v1.151.0'
if [ ! -x "$BIN/victoria-metrics" ] && pgrep -f "go install $vm_install" >/dev/null; then
	echo "waiting for the running install of VictoriaMetrics into $BIN..."
	while [ ! -x "$BIN/victoria-metrics" ] && pgrep -f "go install $vm_install" >/dev/null; do
		sleep 5 # another process's install: no signal to wait on
	done
fi
if [ ! -x "$BIN/victoria-metrics" ]; then
	echo "installing VictoriaMetrics v1.151.0 into $BIN..."
	GOBIN="$BIN" go install "$vm_install"
fi
MINIO=${STRATA_MINIO_BIN:-$BIN/minio}

# need_minio fails unless MinIO is installed.
need_minio() {
	if [ ! -x "$MINIO" ]; then
		echo "no MinIO at $MINIO: run scripts/test.sh once (it installs it) or set STRATA_MINIO_BIN" >&2
		exit 1
	fi
}

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/strata" ./cmd/strata

. scripts/net-lib.sh
