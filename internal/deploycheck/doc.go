// Package deploycheck holds a test that keeps docker-compose.yml, the
// Dockerfile and .env.example consistent with the binaries: every command
// line they run parses with the real binaries' flags, and every variable
// the compose file needs is documented in .env.example. (No Docker engine
// runs in CI; `docker compose config` is the check to run where one does.)
package deploycheck
