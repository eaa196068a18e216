#!/usr/bin/env bash
# Builds Strata's image (strata:latest) from binaries built here: static,
# with cgo libzstd, on scratch with CA certificates and a non-root user.
# Nothing is pulled, so it works on machines with no registry.
#   scripts/images.sh          strata:latest
#   scripts/images.sh --deps   also strata-deps/minio:local and
#                              strata-deps/etcd:local, from the MinIO binary
#                              scripts/test.sh installs and Debian's etcd
#                              (for tests; users pull the upstream images)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${STRATA_CACHE_DIR:-$HOME/.cache/strata}"
WORK="$CACHE/images"
rm -rf "$WORK" && mkdir -p "$WORK"

# Strata: static binaries (netgo and osusergo keep glibc's NSS out), with
# the version stamped in (STRATA_VERSION, else git describe); the revision
# comes from the checkout's VCS stamp.
VERSION="${STRATA_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo 0.1.0-dev)}"
ctx="$WORK/strata"
mkdir -p "$ctx/bin" "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/var/lib/strata" "$ctx/rootfs/tmp"
CGO_ENABLED=1 go build -trimpath -tags netgo,osusergo \
  -ldflags "-s -w -X github.com/stratadb/strata/internal/version.Version=${VERSION} -linkmode external -extldflags -static" \
  -o "$ctx/bin/" ./cmd/metasrv ./cmd/datanode ./cmd/strata
cp /etc/ssl/certs/ca-certificates.crt "$ctx/rootfs/etc/ssl/certs/"
echo 'strata:x:65532:65532:strata:/var/lib/strata:/sbin/nologin' > "$ctx/rootfs/etc/passwd"
echo 'strata:x:65532:' > "$ctx/rootfs/etc/group"
# The data directory belongs to the non-root user (scratch has no chown).
cp docker/strata.Dockerfile "$ctx/Dockerfile"
chmod 1777 "$ctx/rootfs/tmp"
chmod 0777 "$ctx/rootfs/var/lib/strata"
docker build -q -t strata:latest "$ctx" >/dev/null
echo "built strata:latest ($(docker image inspect -f '{{.Size}}' strata:latest) bytes)"

[ "${1:-}" = "--deps" ] || exit 0

# dep NAME BINARY: BINARY and the C library it links, on scratch.
dep() {
  local name=$1 bin=$2 d="$WORK/$1"
  mkdir -p "$d/rootfs/usr/local/bin" "$d/rootfs/tmp" "$d/rootfs/data" "$d/rootfs/etc/ssl/certs"
  cp "$bin" "$d/rootfs/usr/local/bin/$name"
  for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
    mkdir -p "$d/rootfs$(dirname "$lib")"
    cp -L "$lib" "$d/rootfs$lib"
  done
  cp /etc/ssl/certs/ca-certificates.crt "$d/rootfs/etc/ssl/certs/"
  chmod 1777 "$d/rootfs/tmp"
  cp "docker/$name.Dockerfile" "$d/Dockerfile"
  docker build -q -t "strata-deps/$name:local" "$d" >/dev/null
  echo "built strata-deps/$name:local ($(docker image inspect -f '{{.Size}}' "strata-deps/$name:local") bytes)"
}
dep minio "${STRATA_MINIO_BIN:-$CACHE/bin/minio}"
dep etcd "$(command -v etcd)"
