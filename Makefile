# Convenience targets; the README's test command is ./scripts/test.sh.
.PHONY: test integration build proto images

test:
	./scripts/test.sh

# The local-cluster suite alone: metasrv, datanodes, MinIO and etcd as real
# processes (internal/cluster), plus the compose/Dockerfile checks.
integration:
	STRATA_TEST_PKGS="./internal/cluster ./internal/deploycheck" ./scripts/test.sh -v

build:
	go build ./cmd/...

proto:
	go generate ./proto

# strata:latest from binaries built here (static, on scratch); nothing is
# pulled. docker compose up -d needs it first.
images:
	./scripts/images.sh
