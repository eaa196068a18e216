// Package composetest runs the docker-compose cluster for real, in
// containers, from docker-compose.yml as users start it (the README's
// quickstart), and puts it through partitions, pauses, kills, a MinIO
// restart and a rolling restart while a checker writes through every
// datanode. Images are built here from local binaries (scripts/images.sh):
// no registry is needed. It skips where no Docker daemon answers, unless
// STRATA_REQUIRE_DOCKER=1.
package composetest
