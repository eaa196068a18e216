package doccheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const root = "../.."

// repoFiles lists every file and directory of the repository (slash
// paths relative to its root), without .git.
func repoFiles(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		out[rel] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	// mdLink is a markdown link or image: the target in parentheses after
	// the closing bracket of its text.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// pathMention is a name that looks like a repository file: a path of
	// word segments ending in a known extension, or a directory path of
	// at least two segments ending in a slash.
	pathMention = regexp.MustCompile(`(?:^|[\s(` + "`" + `"'])((?:\.{0,2}/)?[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*\.(?:go|md|yml|yaml|json|proto|sh|txt|Dockerfile|mod|sum)|(?:cmd|internal|docs|deploy|docker|scripts|proto)/(?:[A-Za-z0-9_.-]+/)*)(?:$|[\s).,:;` + "`" + `"'])`)
)

// exists reports whether mention, found in a file in dir, names a
// repository file: from the root, from dir, or (for a bare name or a
// partial path, as Go comments write "gc/owner.go") as the end of one.
func exists(files map[string]bool, dir, mention string) bool {
	m := strings.TrimSuffix(strings.TrimPrefix(mention, "./"), "/")
	if files[m] || files[path.Clean(path.Join(dir, m))] {
		return true
	}
	if strings.HasPrefix(mention, "../") || strings.HasPrefix(mention, "/") {
		return false
	}
	for f := range files {
		if strings.HasSuffix(f, "/"+m) {
			return true
		}
	}
	return false
}

// docs are the markdown files checked: README.md and docs/, recursively.
func docs(files map[string]bool) []string {
	var out []string
	for f := range files {
		if f == "README.md" || strings.HasPrefix(f, "docs/") && strings.HasSuffix(f, ".md") {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// notRepositoryFiles are names that look like repository paths but are
// not, each with why it is named.
var notRepositoryFiles = map[string]string{
	"strata.yaml":         "an example config file the reader writes (docs/configuration.md)",
	"datanode.yaml":       "as above",
	"promql/functions.go": "upstream Prometheus' source, which the code follows",
	"promql/engine.go":    "as above",
	"prompb/types.proto":  "upstream Prometheus' remote-write 1.0 definition",
	"prompb/io/prometheus/write/v2/types.proto": "upstream Prometheus' remote-write 2.0 definition",
}

// TestDocsNameOnlyRepositoryFiles: every relative markdown link of
// README.md and docs/ resolves from the linking file, and every
// repository path those files and the comments of every Go file name (a
// path such as internal/layout/layout.go, a directory such as
// internal/gc/, or a bare file name with an extension) exists, so no
// document leans on a file outside the repository.
func TestDocsNameOnlyRepositoryFiles(t *testing.T) {
	files := repoFiles(t)
	check := func(file, text string, line int) {
		dir := path.Dir(file)
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if !files[path.Clean(path.Join(dir, target))] {
				t.Errorf("%s:%d links to %s, which is not in the repository", file, line, m[1])
			}
		}
		for _, m := range pathMention.FindAllStringSubmatch(text, -1) {
			if _, ok := notRepositoryFiles[m[1]]; !ok && !exists(files, dir, m[1]) {
				t.Errorf("%s:%d names %s, which is not in the repository", file, line, m[1])
			}
		}
	}
	for _, doc := range docs(files) {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			check(doc, withoutURLs(line), i+1)
		}
	}
	fset := token.NewFileSet()
	for f := range files {
		if !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, ".pb.go") {
			continue
		}
		af, err := parser.ParseFile(fset, filepath.Join(root, f), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, cg := range af.Comments {
			for _, c := range cg.List {
				check(f, withoutURLs(c.Text), fset.Position(c.Pos()).Line)
			}
		}
	}
}

var url = regexp.MustCompile(`[a-z][a-z0-9+.-]*://\S*`)

// withoutURLs drops URLs, whose paths are not the repository's.
func withoutURLs(s string) string { return url.ReplaceAllString(s, " ") }
