package proto

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratadb/strata/internal/protogen"
)

// TestGeneratedCodeIsCurrent regenerates the code in memory and compares it
// with what is committed.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	root, _ := filepath.Abs("..")
	files, err := protogen.Generate(context.Background(), root, "proto")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("nothing generated")
	}
	for name, want := range files {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Errorf("%s: %v (run go generate ./proto)", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("proto/%s is stale: run go generate ./proto", name)
		}
	}
}
