package page

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestUnsafeOnlyInPage: of package sst and its subpackages, only this one
// imports unsafe (it alone knows parquet-go's memory layouts), and it
// imports nothing of Strata (it knows Parquet pages, not Strata's files).
func TestUnsafeOnlyInPage(t *testing.T) {
	const sstDir, pageDir = "../..", "../../internal/page" // internal/sst, and this package in it
	files := 0
	err := filepath.WalkDir(sstDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		inPage := filepath.ToSlash(filepath.Dir(path)) == pageDir
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			switch {
			case p == "unsafe" && !inPage:
				t.Errorf("%s imports unsafe: only package page may", path)
			case inPage && strings.HasPrefix(p, "github.com/stratadb/strata/"):
				t.Errorf("%s imports %s: package page imports nothing of Strata", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("no Go files found")
	}
}
