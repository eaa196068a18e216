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

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

wait_http() { # url
	for _ in $(seq 1 600); do
		if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
		sleep 0.1 # polling a process we started: no signal exists
	done
	echo "timed out waiting for $1" >&2
	return 1
}
