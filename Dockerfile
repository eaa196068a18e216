# Strata: one image with the three binaries (metasrv, datanode, strata).
#   docker build -t strata .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/ ./cmd/metasrv ./cmd/datanode ./cmd/strata

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
