package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/row"
)

// randomEntries are puts of every kind of value (nulls among them; floats
// that are short decimals and floats that are not) and tombstones, over a
// few series that repeat, with timestamps that go back and forth
// (negative too).
func randomEntries(rng *rand.Rand, n int) []row.Entry {
	series := []string{"", "a", "host=h1", string(make([]byte, 300))}
	for range 5 {
		series = append(series, fmt.Sprintf("s%d", rng.Intn(1000)))
	}
	out := make([]row.Entry, n)
	for i := range out {
		e := row.Entry{Series: series[rng.Intn(len(series))], TS: rng.Int63n(1<<40) - 1<<39}
		if rng.Intn(4) == 0 { // the same series in a string of its own
			e.Series = strings.Clone(e.Series)
		}
		if rng.Intn(10) == 0 {
			e.Op, e.End = row.Delete, e.TS+rng.Int63n(1000)
		} else {
			e.Op = row.Put
			for range rng.Intn(5) {
				var v row.Value
				switch rng.Intn(6) {
				case 1: // doubles, short decimals at scales that rise and fall, -0, huge
					switch rng.Intn(4) {
					case 0:
						v = row.FloatValue(rng.NormFloat64() * math.Pow(10, float64(rng.Intn(20)-10)))
					case 1, 2:
						v = row.FloatValue(decimal.Float(rng.Int63n(1<<40)-1<<39, int8(rng.Intn(7))))
					default:
						v = row.FloatValue([]float64{math.Copysign(0, -1), 0, 1e300, -3, 5e-324}[rng.Intn(5)])
					}
				case 2:
					v = row.IntValue(rng.Int63() - 1<<62)
				case 3:
					v = row.UintValue(rng.Uint64())
				case 4:
					v = row.BoolValue(rng.Intn(2) == 0)
				case 5:
					v = row.StringValue(fmt.Sprint("v", rng.Intn(100)))
				}
				e.Fields = append(e.Fields, v)
			}
		}
		out[i] = e
	}
	return out
}

func sameEntries(t *testing.T, got, want []row.Entry, firstSeq uint64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Seq != firstSeq+uint64(i) || g.Op != w.Op || g.Series != w.Series || g.TS != w.TS || g.End != w.End || len(g.Fields) != len(w.Fields) {
			t.Fatalf("entry %d: %+v, want %+v", i, g, w)
		}
		for j := range w.Fields {
			if !g.Fields[j].Equal(w.Fields[j]) {
				t.Fatalf("entry %d field %d: %v, want %v", i, j, g.Fields[j], w.Fields[j])
			}
		}
	}
}

// A stream block of several appends' compact chunks decodes to the
// entries written, each chunk's references within itself.
func TestCompactChunksRoundTrip(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	for round := range 50 {
		var blocks []Block
		var want [][]row.Entry
		for b := range 1 + rng.Intn(3) {
			blk := Block{Region: layout.RegionID{Table: 1, Region: uint32(b)}, Epoch: 2, FirstSeq: uint64(1 + rng.Intn(100))}
			var all []row.Entry
			for range 1 + rng.Intn(4) {
				es := randomEntries(rng, 1+rng.Intn(200))
				enc, _, raw := encodeRequest(es)
				blk.chunks = append(blk.chunks, enc)
				blk.count += len(es)
				blk.raw += raw
				all = append(all, es...)
			}
			blocks = append(blocks, blk)
			want = append(want, all)
		}
		seg, err := DecodeStream(7, encodeStream(nil, false, blocks))
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, b := range seg.Blocks {
			sameEntries(t, b.Entries, want[i], blocks[i].FirstSeq)
		}
	}
}

// TestCompactKeysByAddress: a chunk writes a series key once when its
// entries share the key's string (as a write's entries share the
// memtable's), and in full for each string of it otherwise; both decode
// to the same entries.
func TestCompactKeysByAddress(t *testing.T) {
	key := strings.Repeat("k", 200)
	shared, apart := make([]row.Entry, 50), make([]row.Entry, 50)
	for i := range shared {
		shared[i] = row.Entry{Series: key, TS: int64(i), Op: row.Delete, End: int64(i)}
		apart[i] = shared[i]
		apart[i].Series = strings.Clone(key)
	}
	_, _, sharedRaw := encodeRequest(shared)
	_, _, apartRaw := encodeRequest(apart)
	if sharedRaw > len(key)+50*8 || apartRaw < 50*len(key) {
		t.Fatalf("raw bytes: %d for one shared key, %d for 50 strings of it (key of %d bytes)", sharedRaw, apartRaw, len(key))
	}
	// Keys that start at one address but end apart (one cut from the
	// other) are two series.
	cut := slices.Clone(shared)
	for i := range cut {
		if i%2 == 0 {
			cut[i].Series = key[:100]
		}
	}
	for _, es := range [][]row.Entry{shared, apart, cut} {
		enc, _, raw := encodeRequest(es)
		blocks := []Block{{Region: layout.RegionID{Table: 1, Region: 1}, Epoch: 1, FirstSeq: 1, chunks: [][]byte{enc}, count: len(es), raw: raw}}
		seg, err := DecodeStream(1, encodeStream(nil, false, blocks))
		if err != nil {
			t.Fatal(err)
		}
		sameEntries(t, seg.Blocks[0].Entries, es, 1)
	}
}

// A block of codecS2, as the writer wrote before compact entries, still
// decodes: a node replays the WAL an earlier version left.
func TestStreamReadsPlainS2Blocks(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	es := randomEntries(rng, 300)
	var raw []byte
	for i := range es {
		raw = appendEntry(raw, &es[i])
	}
	enc, _ := chunk(raw)
	blocks := []Block{{Region: layout.RegionID{Table: 3, Region: 1}, Epoch: 1, FirstSeq: 5, chunks: [][]byte{enc}, count: len(es), raw: len(raw)}}
	data := encodeStream(nil, false, blocks)
	// Mark the block codecS2, and seal the segment again.
	data[streamHeaderLen+32] = codecS2
	body := data[:len(data)-4]
	binary.LittleEndian.PutUint32(data[len(data)-4:], crc32.Checksum(body, castagnoli))
	seg, err := DecodeStream(1, data)
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, seg.Blocks[0].Entries, es, 5)
	// The same bytes read as compact entries do not decode.
	data[streamHeaderLen+32] = codecS2Compact
	binary.LittleEndian.PutUint32(data[len(data)-4:], crc32.Checksum(body, castagnoli))
	if _, err := DecodeStream(1, data); err == nil {
		t.Fatal("plain entries decoded as compact ones")
	}
}

// Compact chunks from a store are checksummed, but a decoder must still
// refuse, not crash on, any bytes: a bad reference, a truncated value, a
// count past the end, an unknown kind.
func FuzzDecodeCompactChunk(f *testing.F) {
	rng := rand.New(rand.NewSource(2))
	for range 8 {
		es := randomEntries(rng, 1+rng.Intn(20))
		st := getCompactState()
		var raw []byte
		for i := range es {
			raw = appendCompact(raw, &es[i], st)
		}
		putCompactState(st)
		f.Add(raw)
	}
	f.Add([]byte{0, 5, 0})             // a reference past the chunk's start
	f.Add([]byte{0, 0, 3, 'a'})        // a key cut short
	f.Add([]byte{0, 0, 0, 2, 9, 0x2f}) // a decimal without its mantissa
	f.Fuzz(func(t *testing.T, raw []byte) {
		es, err := decodeCompactChunk(nil, raw)
		if err != nil {
			return
		}
		// What decodes encodes back to entries that decode the same.
		st := getCompactState()
		defer putCompactState(st)
		var again []byte
		for i := range es {
			again = appendCompact(again, &es[i], st)
		}
		back, err := decodeCompactChunk(nil, again)
		if err != nil {
			t.Fatalf("re-encoded chunk does not decode: %v", err)
		}
		for i := range back { // a block numbers the entries; a chunk does not
			back[i].Seq = uint64(i)
		}
		sameEntries(t, back, es, 0)
	})
}
