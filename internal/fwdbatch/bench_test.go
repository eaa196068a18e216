package fwdbatch

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/tsbs"
)

// tsbsShare is the share of region 0 of 3 of a TSBS batch of lines lines
// over 4,000 hosts, as a sender forwards it: of 10,000 lines, about 3,300
// rows, a host's key 2.5 times; of 4,000, each key once. Its points have
// a shape, as the line-protocol parser gives them (row.Point.Shape).
func tsbsShare(b *testing.B, lines int) region.Batch {
	const hosts, regions = 4000, 3
	tags := make([][]row.Tag, hosts)
	for h := range tags {
		tags[h] = tsbs.Tags(h)
	}
	var bt region.Batch
	keys := make([][]byte, hosts) // a host's points share its key's bytes, as the parser gives them
	for j := range lines {
		p := tsbs.Point(tags, j, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		p.Shape = 1
		k := keys[j%hosts]
		if k == nil {
			var err error
			if k, err = row.EncodeSeries(nil, slices.Clone(p.Tags)); err != nil {
				b.Fatal(err)
			}
			keys[j%hosts] = k
		}
		if layout.Route(k, regions) == 0 {
			bt.Points, bt.Keys = append(bt.Points, p), append(bt.Keys, k)
		}
	}
	return bt
}

// BenchmarkAppend is a sender's encoding of a share (Append), then its
// compression, in each version.
func BenchmarkAppend(b *testing.B) {
	bt := tsbsShare(b, 10000)
	for _, v := range []int{V1, V2} {
		var raw, comp []byte
		enc := new(Encoder)
		b.Run(fmt.Sprintf("V%d/Append", v), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				raw = enc.Append(raw[:0], bt, v)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(bt.Points)), "ns/row")
			b.ReportMetric(float64(len(raw))/float64(len(bt.Points)), "B/row")
		})
		raw = enc.Append(raw[:0], bt, v)
		b.Run(fmt.Sprintf("V%d/Snappy", v), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				comp = Compress(Snappy, comp, raw)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(bt.Points)), "ns/row")
			b.ReportMetric(float64(len(comp))/float64(len(bt.Points)), "B/row")
		})
	}
}

// BenchmarkDecode is an owner's decompression and decoding of a share
// (Decode checks every key); Distinct decodes a share whose keys are all
// different (of 4,000 lines).
func BenchmarkDecode(b *testing.B) {
	for _, lines := range []int{10000, 4000} {
		name := ""
		if lines == 4000 {
			name = "Distinct/"
		}
		bt := tsbsShare(b, lines)
		for _, v := range []int{V1, V2} {
			decodeBench(b, fmt.Sprintf("V%d/%s", v, name), bt, v)
		}
	}
}

func decodeBench(b *testing.B, name string, bt region.Batch, v int) {
	{
		raw := new(Encoder).Append(nil, bt, v)
		comp := Compress(Snappy, nil, raw)
		sc := new(Scratch)
		b.Run(name+"Snappy", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := Decompress(Snappy, sc.Buf, comp, uint64(len(raw)))
				if err != nil {
					b.Fatal(err)
				}
				sc.Buf = out
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(bt.Points)), "ns/row")
		})
		b.Run(name+"Decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := sc.Decode(raw); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(bt.Points)), "ns/row")
		})
	}
}
