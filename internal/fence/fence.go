// Package fence holds the one error every layer returns once a newer owner
// of a region (or the end of this owner's lease) has fenced this one: the
// WAL when a segment number it needed was taken, the manifest when another
// writer committed the version it needed, and the region once either has
// happened. Callers act on it with errors.Is(err, fence.ErrFenced) whichever
// layer noticed.
//
// It is a leaf: wal and manifest, which import nothing of each other, both
// return it.
package fence

import "errors"

// ErrFenced: another owner holds the region. The fenced instance writes,
// acknowledges and commits nothing more, and deletes nothing: the newer
// owner's GC owns whatever it left behind.
var ErrFenced = errors.New("fenced: another owner holds the region")
