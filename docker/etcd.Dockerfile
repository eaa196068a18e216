# etcd for tests on machines with no registry: Debian's etcd-server binary,
# with the C library it links, on scratch. Built by scripts/images.sh
# --deps; runs the upstream image's command line ("etcd --name=...").
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin HOME=/tmp
