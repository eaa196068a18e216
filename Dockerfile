# Strata: one image with the three binaries (metasrv, datanode, strata).
#   docker build -t strata .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# cgo: SSTs are compressed with libzstd (github.com/DataDog/zstd bundles its
# sources), about twice as fast as pure Go. Linked statically (netgo and
# osusergo keep glibc's NSS out), so the binaries run on Alpine.
RUN CGO_ENABLED=1 go build -trimpath -tags netgo,osusergo \
      -ldflags "-s -w -linkmode external -extldflags -static" \
      -o /out/ ./cmd/metasrv ./cmd/datanode ./cmd/strata

FROM alpine:3.21
# wget is used by the compose healthchecks; ca-certificates for AWS S3.
RUN apk add --no-cache ca-certificates wget \
 && addgroup -S strata && adduser -S -G strata -h /var/lib/strata strata \
 && mkdir -p /var/lib/strata && chown strata:strata /var/lib/strata
COPY --from=build /out/ /usr/local/bin/
USER strata
WORKDIR /var/lib/strata
# datanode HTTP (line protocol), datanode gRPC, metasrv admin gRPC
EXPOSE 8086 8087 8088
CMD ["strata", "standalone", "--data-dir", "/var/lib/strata"]
