// Command protogen regenerates proto/**/*.pb.go. Run it through
// `go generate ./proto`.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stratadb/strata/internal/protogen"
)

func main() {
	// go generate runs in proto/; the module root is its parent.
	root, err := filepath.Abs("..")
	if err == nil {
		var files map[string][]byte
		if files, err = protogen.Generate(context.Background(), root, "proto"); err == nil {
			for name, data := range files {
				path := filepath.Join(root, "proto", name)
				if err = os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					break
				}
				if err = os.WriteFile(path, data, 0o644); err != nil {
					break
				}
				fmt.Println("wrote", filepath.Join("proto", name))
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
