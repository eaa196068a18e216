// Command datanode is a Strata datanode process. It is not built yet; see README.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "datanode: not yet implemented; see README.md for what exists today")
	os.Exit(2)
}
