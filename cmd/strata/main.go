// Command strata is Strata's CLI and its single-process server
// (`strata standalone`).
package main

import (
	"fmt"
	"os"
)

const usage = `strata: Strata's CLI.

Usage:
  strata standalone    run metasrv, a datanode and a local store in one process
  strata fsck          check a store's ownership invariant offline

Neither is built yet: this release holds the object-store layer and the
region manifest (see docs/).
`

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Print(usage)
		return
	}
	fmt.Fprintf(os.Stderr, "strata %s: not yet implemented; see README.md for what exists today\n", os.Args[1])
	os.Exit(2)
}
