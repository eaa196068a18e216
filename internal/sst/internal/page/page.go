// Package page is what package sst knows of Parquet below parquet-go's
// API: it decodes a data page of a required 64-bit column by hand (its
// Thrift page header, its CRC, its zstd body, its PLAIN or
// DELTA_BINARY_PACKED values), stamps parquet.Values by their memory
// layout, and reinterprets slices of 64-bit words.
//
// It is the only package of sst that imports unsafe or relies on
// parquet-go's in-memory layouts (TestUnsafeOnlyInPage holds that): an
// upgrade of parquet-go is checked here. It knows nothing of Strata's
// files, columns or rows; package sst decides which pages to read and what
// their values mean.
package page

import (
	"errors"

	"github.com/parquet-go/bitpack"
)

// ErrCorrupt: bytes that do not decode. It is sst.ErrCorrupt.
var ErrCorrupt = errors.New("sst: corrupt file")

// Padding is the capacity a page's bytes need past their end: what
// bitpack may read past a miniblock (Values.Load, DeltaCursor.Reset).
const Padding = bitpack.PaddingInt64
