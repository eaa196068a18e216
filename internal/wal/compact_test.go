package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/s2"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/testseed"
	"github.com/stratadb/strata/internal/walstream"
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
	var last []row.Kind // the last put's kinds
	for i := range out {
		e := row.Entry{Series: series[rng.Intn(len(series))], TS: rng.Int63n(1<<40) - 1<<39}
		if rng.Intn(4) == 0 { // the same series in a string of its own
			e.Series = strings.Clone(e.Series)
		}
		if rng.Intn(10) == 0 {
			e.Op, e.End = row.Delete, e.TS+rng.Int63n(1000)
		} else {
			e.Op = row.Put
			// Mostly the kinds of the put before, as sources send them
			// (a float's decimal scale may still change).
			kinds := last
			if last == nil || rng.Intn(3) == 0 {
				kinds = nil
				for range rng.Intn(5) {
					kinds = append(kinds, []row.Kind{row.Null, row.Float, row.Int, row.Uint, row.Bool, row.String}[rng.Intn(6)])
				}
			}
			last = kinds
			for _, kind := range kinds {
				var v row.Value
				switch kind {
				case row.Float: // doubles, short decimals at scales that rise and fall, -0, huge
					switch rng.Intn(4) {
					case 0:
						v = row.FloatValue(rng.NormFloat64() * math.Pow(10, float64(rng.Intn(20)-10)))
					case 1, 2:
						v = row.FloatValue(decimal.Float(rng.Int63n(1<<40)-1<<39, int8(rng.Intn(7))))
					default:
						v = row.FloatValue([]float64{math.Copysign(0, -1), 0, 1e300, -3, 5e-324}[rng.Intn(5)])
					}
				case row.Int:
					v = row.IntValue(rng.Int63() - 1<<62)
				case row.Uint:
					v = row.UintValue(rng.Uint64())
				case row.Bool:
					v = row.BoolValue(rng.Intn(2) == 0)
				case row.String:
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
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewSource(seed))
	for round := range 50 {
		blocks, want := randomBlocks(rng, false)
		seg, err := DecodeStream(7, encodeStream(nil, false, blocks), nil)
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
		seg, err := DecodeStream(1, encodeStream(nil, false, blocks), nil)
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
	data[walstream.HeaderLen+32] = codecS2
	body := data[:len(data)-4]
	binary.LittleEndian.PutUint32(data[len(data)-4:], crc32.Checksum(body, castagnoli))
	seg, err := DecodeStream(1, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, seg.Blocks[0].Entries, es, 5)
	// The same bytes read as compact entries do not decode.
	data[walstream.HeaderLen+32] = codecS2Compact
	binary.LittleEndian.PutUint32(data[len(data)-4:], crc32.Checksum(body, castagnoli))
	if _, err := DecodeStream(1, data, nil); err == nil {
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
		var raw, old []byte
		for i := range es {
			raw = appendCompact(raw, &es[i], st)
		}
		putCompactState(st)
		st = getCompactState()
		for i := range es {
			old = appendCompactEach(old, &es[i], st)
		}
		putCompactState(st)
		f.Add(raw, true)
		f.Add(old, false)
	}
	f.Add([]byte{0, 5, 0}, true)                      // a reference past the chunk's start
	f.Add([]byte{0, 0, 3, 'a'}, true)                 // a key cut short
	f.Add([]byte{0, 0, 0, 2, 9, 0x2f}, false)         // a decimal without its mantissa
	f.Add([]byte{0, 0, 0, 3}, true)                   // kinds of a put before the first
	f.Add([]byte{0, 0, 0, 2, 1, 1, 0, 0, 0, 5}, true) // one value of the last put's kinds, which had none
	f.Fuzz(func(t *testing.T, raw []byte, carried bool) {
		es, err := decodeCompactChunk(nil, raw, carried)
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
		back, err := decodeCompactChunk(nil, again, true)
		if err != nil {
			t.Fatalf("re-encoded chunk does not decode: %v", err)
		}
		for i := range back { // a block numbers the entries; a chunk does not
			back[i].Seq = uint64(i)
		}
		sameEntries(t, back, es, 0)
	})
}

// appendCompactEach is appendCompact as it was for codecS2Compact, every
// value with its kind: what earlier versions wrote, kept to check that
// their blocks still decode.
func appendCompactEach(dst []byte, e *row.Entry, st *compactState) []byte {
	dst = appendCompactHead(dst, e, st)
	if e.Op == row.Delete {
		return binary.AppendVarint(dst, e.End)
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Fields)))
	for len(st.scales) < len(e.Fields) {
		st.scales = append(st.scales, 0)
	}
	for j, v := range e.Fields {
		if v.Kind() == row.Float && st.scales[j] != decimal.None {
			if m, ok := st.mantissa(j, v.Float()); ok {
				dst = append(dst, byte(kindDecimal+st.scales[j]))
				dst = binary.AppendVarint(dst, m)
				continue
			}
		}
		dst = appendValue(dst, v)
	}
	return dst
}

// A block of codecS2Compact chunks, as earlier versions wrote, still
// decodes; the same chunks read as carried kinds do not decode to the
// entries written (the codec is not a formality).
func TestStreamReadsCompactBlocksOfEveryKind(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewSource(seed))
	for round := range 50 {
		es := randomEntries(rng, 1+rng.Intn(300))
		st := getCompactState()
		var raw []byte
		for i := range es {
			raw = appendCompactEach(raw, &es[i], st)
		}
		putCompactState(st)
		enc, _ := chunk(raw)
		blocks := []Block{{Region: layout.RegionID{Table: 3, Region: 1}, Epoch: 1, FirstSeq: 5, chunks: [][]byte{enc}, count: len(es), raw: len(raw)}}
		data := encodeStream(nil, false, blocks)
		if data[walstream.HeaderLen+32] != codecS2Kinds {
			t.Fatalf("the writer wrote codec %d", data[walstream.HeaderLen+32])
		}
		reseal := func(codec byte) {
			data[walstream.HeaderLen+32] = codec
			binary.LittleEndian.PutUint32(data[len(data)-4:], crc32.Checksum(data[:len(data)-4], castagnoli))
		}
		reseal(codecS2Compact)
		seg, err := DecodeStream(1, data, nil)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		sameEntries(t, seg.Blocks[0].Entries, es, 5)
		if round == 0 {
			// Enough puts that read as carried kinds they cannot all decode
			// as written.
			es = randomEntries(rng, 200)
			st, raw = getCompactState(), nil
			for i := range es {
				raw = appendCompactEach(raw, &es[i], st)
			}
			putCompactState(st)
			if got, err := decodeCompactChunk(nil, raw, true); err == nil && equalEntries(got, es) {
				t.Fatal("a chunk of kinds with every value decoded as carried kinds")
			}
		}
	}
}

// Puts of the kinds of the put before write their kinds once: a TSBS-like
// chunk of ten decimal floats a row takes at least a byte a value less
// than with every value's kind, and decodes to the same entries.
func TestCompactCarriesKinds(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	es := make([]row.Entry, 1000)
	for i := range es {
		fs := make([]row.Value, 10)
		for j := range fs {
			fs[j] = row.FloatValue(decimal.Float(rng.Int63n(10000), 2))
		}
		es[i] = row.Entry{Series: fmt.Sprint("host_", i%400), TS: int64(i / 400), Op: row.Put, Fields: fs}
	}
	es[500].Fields[3] = row.FloatValue(1.5e-300) // no decimal: the kinds change for the rest
	es[700].Fields = es[700].Fields[:4]          // fewer values: written with their kinds
	encode := func(appendFn func([]byte, *row.Entry, *compactState) []byte) []byte {
		st := getCompactState()
		defer putCompactState(st)
		var raw []byte
		for i := range es {
			raw = appendFn(raw, &es[i], st)
		}
		return raw
	}
	carried, each := encode(appendCompact), encode(appendCompactEach)
	if len(each)-len(carried) < 9*len(es) {
		t.Fatalf("%d bytes with kinds carried, %d with every value's: want at least %d less", len(carried), len(each), 9*len(es))
	}
	got, err := decodeCompactChunk(nil, carried, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		got[i].Seq = uint64(i)
	}
	sameEntries(t, got, es, 0)
}

func equalEntries(a, b []row.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Op != b[i].Op || a[i].Series != b[i].Series || a[i].TS != b[i].TS || a[i].End != b[i].End || len(a[i].Fields) != len(b[i].Fields) {
			return false
		}
		for j := range a[i].Fields {
			if !a[i].Fields[j].Equal(b[i].Fields[j]) {
				return false
			}
		}
	}
	return true
}

// TestMixedBlocksRoundTrip: a block whose appends came as forwarded
// chunks (AppendChunk) and as entries decodes to every append's entries in
// order, through the reader's Forwarded decoder; without one, or with one
// that gives more entries than the header says, the segment is corrupt.
func TestMixedBlocksRoundTrip(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewSource(seed))
	// A forwarded chunk here is compact entries too, decoded as such: what
	// a chunk holds is the decoder's business.
	fwd := func(data []byte, dst []row.Entry) ([]row.Entry, error) { return decodeCompactChunk(dst, data, true) }
	for round := range 30 {
		blocks, want := randomBlocks(rng, true)
		data := encodeStream(nil, false, blocks)
		seg, err := DecodeStream(7, data, fwd)
		if err != nil {
			t.Fatalf("seed %d round %d: %v", seed, round, err)
		}
		for i, b := range seg.Blocks {
			sameEntries(t, b.Entries, want[i], blocks[i].FirstSeq)
		}
		if slices.ContainsFunc(blocks, func(b Block) bool { return b.mixed() }) {
			if _, err := DecodeStream(7, data, nil); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("seed %d round %d: decoded without a Forwarded decoder: %v", seed, round, err)
			}
			more := func(data []byte, dst []row.Entry) ([]row.Entry, error) {
				dst, err := fwd(data, dst)
				return append(dst, row.Entry{}), err
			}
			if _, err := DecodeStream(7, data, more); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("seed %d round %d: a decoder that gives too many entries: %v", seed, round, err)
			}
		}
	}
}

// randomBlocks returns up to 3 regions' blocks of up to 4 appends each,
// and each block's entries. With forwarded, about half the appends are
// forwarded chunks (of compact entries, for a decoder to read as such).
func randomBlocks(rng *rand.Rand, forwarded bool) ([]Block, [][]row.Entry) {
	var blocks []Block
	var want [][]row.Entry
	for b := range 1 + rng.Intn(3) {
		blk := Block{Region: layout.RegionID{Table: 1, Region: uint32(b)}, Epoch: 2, FirstSeq: uint64(1 + rng.Intn(100))}
		var all []row.Entry
		for range 1 + rng.Intn(4) {
			es := randomEntries(rng, 1+rng.Intn(200))
			enc, _, raw := encodeRequest(es)
			fwd := forwarded && rng.Intn(2) == 0
			if fwd {
				st := getCompactState()
				var rawBytes []byte
				for i := range es {
					rawBytes = appendCompact(rawBytes, &es[i], st)
				}
				putCompactState(st)
				enc = s2.Encode(nil, rawBytes)
			}
			blk.chunks = append(blk.chunks, enc)
			blk.fwd = append(blk.fwd, fwd)
			blk.count += len(es)
			blk.raw += raw
			all = append(all, es...)
		}
		blocks = append(blocks, blk)
		want = append(want, all)
	}
	return blocks, want
}
