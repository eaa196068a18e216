// Package proto holds Strata's gRPC definitions. The Go code under
// strata/v1 is generated: run `go generate ./proto` after editing a
// .proto file (no protoc needed; see internal/protogen). A test fails when
// the committed code is stale.
package proto

//go:generate go run ../internal/protogen/cmd
