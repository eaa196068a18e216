# Strata's image: the three binaries (metasrv, datanode, strata), built on
# the host by scripts/images.sh (static, cgo libzstd included), on scratch
# with CA certificates and a non-root user. Nothing is pulled.
#   scripts/images.sh        (or: make images)
FROM scratch
COPY rootfs/ /
COPY bin/ /usr/local/bin/
ENV PATH=/usr/local/bin
# The Go scheduler's monitor (sysmon) kept out of its deep sleep: else each
# time a server wakes from idle to a request it polls every 20 µs for a
# millisecond or more, a context switch each, and a datanode of a cluster
# wakes for every forwarded write and remote scan. Costs about 2 ms of CPU
# a second while idle, and on a machine up longer than 24.8 days a line of
# scheduler state on stderr as each process starts (docs/configuration.md,
# "The runtime's monitor").
ENV GODEBUG=schedtrace=2147483647
USER 65532:65532
WORKDIR /var/lib/strata
# datanode HTTP (line protocol), datanode gRPC, metasrv admin gRPC
EXPOSE 8086 8087 8088 8089
CMD ["strata", "standalone", "--data-dir", "/var/lib/strata", "--http-addr", ":8086", "--grpc-addr", ":8087"]
