// Package doccheck holds a test that keeps the repository's prose honest
// about its own files: every repository file or directory that README.md,
// docs/ or a Go comment names must exist, so no document points at a file
// that is not in the repository.
package doccheck
