# Strata's image: the three binaries (metasrv, datanode, strata), built on
# the host by scripts/images.sh (static, cgo libzstd included), on scratch
# with CA certificates and a non-root user. Nothing is pulled.
#   scripts/images.sh        (or: make images)
FROM scratch
COPY rootfs/ /
COPY bin/ /usr/local/bin/
ENV PATH=/usr/local/bin
USER 65532:65532
WORKDIR /var/lib/strata
# datanode HTTP (line protocol), datanode gRPC, metasrv admin gRPC
EXPOSE 8086 8087 8088 8089
CMD ["strata", "standalone", "--data-dir", "/var/lib/strata", "--http-addr", ":8086", "--grpc-addr", ":8087"]
