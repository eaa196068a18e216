package row

// Written writes zeros over s's whole capacity, a new buffer's that is
// kept for reuse, and returns it. Go does not zero fresh memory (the
// kernel's is), and the collector's marking reads a buffer with pointers,
// which can come before its first write: a page read first is the
// kernel's shared zero page, and the first write then copies it and
// flushes the other CPUs' TLBs (on a 2-core VM, 5% of a write's CPU went
// to these faults in the parser's arenas). Written at once, each page
// takes one plain fault. The arenas are rows' parts (a parser's tags
// and fields, a write's values), and the line-protocol parser links
// nothing of Strata but rows, so it is here.
func Written[T any](s []T) []T {
	clear(s[:cap(s)])
	return s
}
