// Package deploycheck holds a test that keeps docker-compose.yml, the
// image's Dockerfile and .env.example consistent with the binaries without
// Docker: every command line they run parses with the real binaries'
// flags, and every variable the compose file needs is documented in
// .env.example. internal/composetest runs the cluster for real.
package deploycheck
