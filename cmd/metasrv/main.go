// Command metasrv is a Strata metasrv process. It is not built yet; see README.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "metasrv: not yet implemented; see README.md for what exists today")
	os.Exit(2)
}
