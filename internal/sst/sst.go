// Package sst writes and reads a region's immutable sorted files: Parquet
// (github.com/parquet-go/parquet-go), zstd-compressed, rows in (series, ts,
// seq desc) order, row groups of up to 100k rows with min/max statistics.
// The column layout is specified in docs/format/sst.md.
//
// The package by job:
//
//   - sst.go, schema.go: reserved columns, the format version, and the
//     mapping between field kinds and Parquet columns, which writer and
//     reader share.
//   - writer.go: Write, its options and its pipeline (the caller copies
//     entries into batches, a worker per row group encodes them, a
//     committer writes row groups in order); batch.go: the batches and how
//     they become Parquet values.
//   - reader.go: Open, the footer and the statistics read from it;
//     ranged.go: reading a large file in ranges; cache.go: open readers
//     and blocks of ranged files kept across scans.
//   - iter.go: Iter, the row iterator (row groups, series runs, entries),
//     over colstream.go's column streams, which read a column chunk
//     through parquet-go's page decoding.
//   - columns.go: ReadColumns, the columnar read of one numeric field by
//     series; pages.go: its reader of required 64-bit chunks, which decodes
//     their pages itself (package internal/page).
//   - series.go: the series index written beside each file.
//   - pipe.go: Pipe, which carries a Write's bytes to their upload as they
//     are written.
//   - zstd.go, zstd_cgo.go, zstd_nocgo.go: compression.
//
// Package internal/page alone knows Parquet below parquet-go's API (page
// headers, delta decoding) and parquet-go's memory layouts, and alone
// converts memory from one type to another.
package sst

import (
	"github.com/stratadb/strata/internal/sst/internal/page"
)

// Reserved column names.
const (
	ColSeries    = "__series"
	ColTS        = "__ts"
	ColSeq       = "__seq"
	ColDeleteEnd = "__delete_end"
)

// The format's version: 2 is 1 with float fields written as decimals
// (WriteOptions.Decimals), which a reader of 1 would take for integers. A
// file without such a column is written as 1.
const (
	formatKey           = "strata.sst.format"
	formatValue         = "1"
	formatDecimalsValue = "2"
)

// ErrCorrupt: an SST does not decode or does not match its manifest entry.
var ErrCorrupt = page.ErrCorrupt
