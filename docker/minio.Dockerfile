# MinIO for tests on machines with no registry: the binary scripts/test.sh
# installs (go install), with the C library it links, on scratch. Built by
# scripts/images.sh --deps; takes the upstream image's arguments
# ("server /data").
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin HOME=/tmp
ENTRYPOINT ["/usr/local/bin/minio"]
