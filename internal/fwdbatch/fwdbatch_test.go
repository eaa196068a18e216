package fwdbatch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/decimal"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/testseed"
)

// staleNaN is Prometheus's staleness marker.
var staleNaN = math.Float64frombits(0x7ff0000000000002)

// randomBatch is a prepared batch of runs of random shapes: tags in any
// order (some with empty values, which keys leave out), every field kind,
// NaN, ±Inf and staleness markers among the floats.
func randomBatch(rng *rand.Rand) region.Batch {
	var b region.Batch
	floats := []float64{math.NaN(), staleNaN, math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1), math.MaxFloat64, math.SmallestNonzeroFloat64}
	for run := range rng.IntN(6) {
		ntags := rng.IntN(5)
		names := rng.Perm(8)[:ntags]
		nf := 1 + rng.IntN(5)
		kinds := make([]row.Kind, nf)
		for j := range kinds {
			kinds[j] = row.Kind(1 + rng.IntN(5))
		}
		shape := uint32(0) // unknown
		if rng.IntN(2) == 0 {
			shape = uint32(run + 1)
		}
		start := len(b.Points)
		for range 1 + rng.IntN(40) {
			p := row.Point{TS: rng.Int64() - rng.Int64(), Shape: shape}
			if rng.IntN(4) == 0 {
				p.TS = int64(rng.IntN(1000)) * int64(time.Second)
			}
			for _, n := range names {
				v := fmt.Sprintf("v%d", rng.IntN(20))
				if rng.IntN(10) == 0 {
					v = ""
				}
				p.Tags = append(p.Tags, row.Tag{Name: fmt.Sprintf("t%d", n), Value: v})
			}
			for j, k := range kinds {
				var v row.Value
				switch k {
				case row.Float:
					if decimals := run%2 == 0; decimals && rng.IntN(20) != 0 {
						// Short decimals at several scales (version 2
						// sends their mantissas), now and then one that
						// is not (the column goes as it is).
						v = row.FloatValue(float64(rng.Int64N(2_000_000)-1_000_000) / math.Pow10(rng.IntN(4)))
					} else if rng.IntN(3) == 0 {
						v = row.FloatValue(floats[rng.IntN(len(floats))])
					} else {
						v = row.FloatValue(rng.NormFloat64() * 1e6)
					}
				case row.Int:
					v = row.IntValue(rng.Int64() - rng.Int64())
				case row.Uint:
					v = row.UintValue(rng.Uint64() >> rng.IntN(64))
				case row.String:
					s := make([]byte, rng.IntN(30))
					for i := range s {
						s[i] = byte(rng.IntN(256))
					}
					v = row.StringValue(string(s))
				case row.Bool:
					v = row.BoolValue(rng.IntN(2) == 0)
				}
				p.Fields = append(p.Fields, row.Field{Name: fmt.Sprintf("f%d", j), Value: v})
			}
			if len(b.Points) > start && rng.IntN(3) == 0 {
				// A series of the run again, as the parser gives it: its
				// key's bytes shared (Encoder finds it by address).
				j := start + rng.IntN(len(b.Points)-start)
				{
					p.Tags = b.Points[j].Tags
					b.Points = append(b.Points, p)
					b.Keys = append(b.Keys, b.Keys[j])
					continue
				}
			}
			key, err := row.EncodeSeries(nil, slices.Clone(p.Tags))
			if err != nil {
				panic(err)
			}
			b.Points = append(b.Points, p)
			b.Keys = append(b.Keys, key)
		}
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	sc := new(Scratch) // reused: each batch is checked before the next decode
	var raw, comp []byte
	enc := new(Encoder) // reused too
	for iter := range 1000 {
		b := randomBatch(rng)
		v := V1 + iter%2
		raw = enc.Append(raw[:0], b, v)
		for _, c := range []Codec{None, Snappy, Zstd} {
			z := Compress(c, comp, raw)
			if c != None {
				comp = z
			}
			data, err := Decompress(c, sc.Buf, z, uint64(len(raw)))
			if err != nil {
				t.Fatalf("seed %d, batch %d, codec %d: %v", seed, iter, c, err)
			}
			if c != None {
				sc.Buf = data
			}
			decode := sc.Decode
			if iter%4 < 2 {
				decode = Decode
			}
			got, err := decode(data)
			if err != nil {
				t.Fatalf("seed %d, batch %d, version %d, codec %d: %v", seed, iter, v, c, err)
			}
			if err := same(b, got); err != nil {
				t.Fatalf("seed %d, batch %d, version %d, codec %d: %v", seed, iter, v, c, err)
			}
		}
	}
}

// same compares a batch with its decoding: keys, timestamps, field names
// and values (floats by bits), tag names; the decoded points of a run
// share a shape.
func same(want, got region.Batch) error {
	if len(got.Points) != len(want.Points) || len(got.Keys) != len(want.Keys) {
		return fmt.Errorf("%d points, %d keys; want %d", len(got.Points), len(got.Keys), len(want.Points))
	}
	for i, w := range want.Points {
		g := got.Points[i]
		if string(got.Keys[i]) != string(want.Keys[i]) {
			return fmt.Errorf("point %d: key %q, want %q", i, got.Keys[i], want.Keys[i])
		}
		if g.TS != w.TS || len(g.Fields) != len(w.Fields) || len(g.Tags) != len(w.Tags) {
			return fmt.Errorf("point %d: %+v, want %+v", i, g, w)
		}
		for j := range w.Fields {
			if g.Fields[j].Name != w.Fields[j].Name || !g.Fields[j].Value.Equal(w.Fields[j].Value) {
				return fmt.Errorf("point %d: field %d: %v=%v, want %v=%v", i, j, g.Fields[j].Name, g.Fields[j].Value, w.Fields[j].Name, w.Fields[j].Value)
			}
		}
		for j := range w.Tags {
			if g.Tags[j].Name != w.Tags[j].Name {
				return fmt.Errorf("point %d: tag %d: %q, want %q", i, j, g.Tags[j].Name, w.Tags[j].Name)
			}
		}
		if g.Shape == 0 || i > 0 && row.SameShape(&w, &want.Points[i-1]) != (g.Shape == got.Points[i-1].Shape) {
			return fmt.Errorf("point %d: shape %d (previous %d)", i, g.Shape, got.Points[i-1].Shape)
		}
	}
	return nil
}

// Truncations and corruptions corruptions of a batch are refused with
// ErrMalformed (so region.ErrInvalidWrite) or decode to a batch: none
// panics, none allocates beyond what the bytes warrant.
func TestMalformed(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	for iter := range 400 {
		b := randomBatch(rng)
		if len(b.Points) == 0 {
			continue
		}
		raw := new(Encoder).Append(nil, b, V1+iter%2)
		for range 100 {
			n := rng.IntN(len(raw))
			if _, err := Decode(raw[:n]); !errors.Is(err, ErrMalformed) || !errors.Is(err, region.ErrInvalidWrite) {
				t.Fatalf("seed %d, batch %d: %d of %d bytes: %v", seed, iter, n, len(raw), err)
			}
		}
		for range 50 {
			bad := slices.Clone(raw)
			bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
			if _, err := Decode(bad); err != nil && !errors.Is(err, ErrMalformed) {
				t.Fatalf("seed %d, batch %d: %v", seed, iter, err)
			}
		}
	}
	// Keys that are not series keys of the run's tags.
	p := row.Point{Tags: []row.Tag{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}}, TS: 1, Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}}
	for _, v := range []int{V1, V2} {
		for _, key := range []string{"\x01a", "\x01a\x05x", "\x01b\x012\x01a\x011", "\x01a\x00", "\x01c\x011", "\x01a\x011\x01a\x011"} {
			raw := new(Encoder).Append(nil, region.Batch{Points: []row.Point{p}, Keys: [][]byte{[]byte(key)}}, v)
			var pe *region.PointError
			if _, err := Decode(raw); !errors.Is(err, ErrMalformed) || !errors.As(err, &pe) {
				t.Errorf("version %d, key %q: %v", v, key, err)
			}
		}
	}
	if _, err := Decode([]byte{3, 0, 0}); !errors.Is(err, ErrMalformed) {
		t.Errorf("version 3: %v", err)
	}
	// A declared size over the limit, or not the decoded size.
	raw := Append(nil, region.Batch{Points: []row.Point{p}, Keys: [][]byte{[]byte("\x01a\x011")}})
	if _, err := Decompress(Zstd, nil, Compress(Zstd, nil, raw), MaxSize+1); !errors.Is(err, region.ErrBatchTooLarge) {
		t.Errorf("over the limit: %v", err)
	}
	for _, c := range []Codec{None, Snappy, Zstd} {
		if _, err := Decompress(c, nil, Compress(c, nil, raw), uint64(len(raw)+1)); !errors.Is(err, ErrMalformed) {
			t.Errorf("codec %d, a size not the decoded one: %v", c, err)
		}
	}
	if _, err := Decompress(7, nil, raw, uint64(len(raw))); !errors.Is(err, ErrMalformed) {
		t.Errorf("codec 7: %v", err)
	}
}

// Version 1: a key is checked once per run: its repeats in the run share its bytes,
// but a run of other tags checks it again, and a bad key after good ones
// (repeated or not) refuses the batch at its index.
func TestRepeatedKeys(t *testing.T) {
	ab := []row.Tag{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}}
	key, err := row.EncodeSeries(nil, slices.Clone(ab))
	if err != nil {
		t.Fatal(err)
	}
	point := func(tags []row.Tag) row.Point {
		return row.Point{Tags: tags, TS: 1, Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}}
	}
	good := point(ab)
	sc := new(Scratch)
	b, err := sc.Decode(new(Encoder).Append(nil, region.Batch{Points: []row.Point{good, good, good}, Keys: [][]byte{key, slices.Clone(key), slices.Clone(key)}}, V1))
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range b.Keys {
		if string(k) != string(key) || &k[0] != &b.Keys[0][0] {
			t.Errorf("key %d: %q at %p, want %q at %p", i, k, &k[0], key, &b.Keys[0][0])
		}
	}
	onlyA := point([]row.Tag{{Name: "a", Value: "1"}})
	bad := []byte("\x01a\x011\x01b\x01") // b's value cut short
	for name, tc := range map[string]struct {
		b     region.Batch
		index int
	}{
		"a key of tags a and b in a run of tag a": {region.Batch{Points: []row.Point{good, good, onlyA}, Keys: [][]byte{key, key, key}}, 2},
		"a bad key after good ones":               {region.Batch{Points: []row.Point{good, good, good}, Keys: [][]byte{key, key, bad}}, 2},
		"a key with its tag b twice":              {region.Batch{Points: []row.Point{good, point([]row.Tag{{Name: "b", Value: "2"}, {Name: "b", Value: "2"}})}, Keys: [][]byte{key, []byte("\x01b\x012\x01b\x012")}}, 1},
	} {
		var pe *region.PointError
		_, err := sc.Decode(new(Encoder).Append(nil, tc.b, V1))
		if !errors.Is(err, ErrMalformed) || !errors.As(err, &pe) || pe.Index != tc.index {
			t.Errorf("%s: %v, want a malformed point %d", name, err, tc.index)
		}
	}
	// The scratch holds no key of a batch once Decode returned.
	if len(sc.seen) != 0 {
		t.Errorf("%d keys still seen", len(sc.seen))
	}
}

// Version 2 sends a run's keys once each (as far as their addresses tell)
// and each point an index: the points of a key share its bytes on
// arrival, a bad key is refused at the first point that has it, and a
// bad key no point has, an index past the keys, more keys than points or
// none for a point refuse the batch.
func TestKeysOnce(t *testing.T) {
	ab := []row.Tag{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}}
	key, err := row.EncodeSeries(nil, slices.Clone(ab))
	if err != nil {
		t.Fatal(err)
	}
	other, err := row.EncodeSeries(nil, []row.Tag{{Name: "a", Value: "3"}, {Name: "b", Value: "4"}})
	if err != nil {
		t.Fatal(err)
	}
	point := func(ts int64) row.Point {
		return row.Point{Tags: ab, TS: ts, Fields: []row.Field{{Name: "v", Value: row.FloatValue(float64(ts))}}}
	}
	b := region.Batch{Points: []row.Point{point(1), point(2), point(3), point(4)}, Keys: [][]byte{key, other, key, other}}
	enc := new(Encoder)
	v2 := enc.Append(nil, b, V2)
	v1 := enc.Append(nil, b, V1)
	if len(v2) >= len(v1)-len(key) {
		t.Errorf("version 2: %d bytes, version 1 %d: the repeats' keys were sent again", len(v2), len(v1))
	}
	got, err := new(Scratch).Decode(v2)
	if err != nil {
		t.Fatal(err)
	}
	if err := same(b, got); err != nil {
		t.Fatal(err)
	}
	if &got.Keys[0][0] != &got.Keys[2][0] || &got.Keys[1][0] != &got.Keys[3][0] || &got.Keys[0][0] == &got.Keys[1][0] {
		t.Errorf("the points of a key do not share its bytes: %p %p %p %p", &got.Keys[0][0], &got.Keys[1][0], &got.Keys[2][0], &got.Keys[3][0])
	}

	// A run's encoding by hand: version, rows, runs; n, tags a and b,
	// field v float; keys; indexes; timestamps; values (decimals, scale 0).
	run := func(n int, keys []string, index []byte) []byte {
		out := []byte{V2, byte(n), 1, byte(n), 2, 1, 'a', 1, 'b', 1, 1, 'v', byte(row.Float), byte(len(keys))}
		for _, k := range keys {
			out = append(out, byte(len(k)))
			out = append(out, k...)
		}
		out = append(out, index...)
		for range n {
			out = append(out, 2) // varint 1
		}
		out = append(out, 0) // scale 0
		for range n {
			out = append(out, 2) // mantissa 1: 1.0
		}
		return out
	}
	good, bad := string(key), "\x01a\x011\x01b\x01" // b's value cut short
	if _, err := Decode(run(2, []string{good}, []byte{0, 0})); err != nil {
		t.Fatalf("the hand-made batch: %v", err)
	}
	var pe *region.PointError
	if _, err := Decode(run(3, []string{good, bad}, []byte{0, 0, 1})); !errors.Is(err, ErrMalformed) || !errors.As(err, &pe) || pe.Index != 2 {
		t.Errorf("a bad key at point 2: %v", err)
	}
	// In a second run the index counts the first run's points too.
	second := run(2, []string{good}, []byte{0, 0})
	second[2] = 2 // runs
	second = append(second, run(3, []string{good, bad}, []byte{0, 0, 1})[3:]...)
	second[1] = 5 // rows
	if _, err := Decode(second); !errors.Is(err, ErrMalformed) || !errors.As(err, &pe) || pe.Index != 4 {
		t.Errorf("a bad key at point 2 of the second run: %v, want a malformed point 4", err)
	}
	for name, raw := range map[string][]byte{
		"a bad key no point has":  run(2, []string{good, bad}, []byte{0, 0}),
		"an index past the keys":  run(2, []string{good}, []byte{0, 1}),
		"more keys than points":   run(1, []string{good, good}, []byte{0}),
		"no keys for the points":  run(1, nil, []byte{0}),
		"a batch cut in the keys": run(2, []string{good}, []byte{0, 0})[:16],
	} {
		if _, err := Decode(raw); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Version 2 sends a float column of short decimals as their mantissas
// (a few bytes each, not eight), raising the scale as later values need,
// and a column with any other value (a NaN, a staleness marker, -0, a
// long fraction) as its values' bits: both to the bit.
func TestDecimals(t *testing.T) {
	tags := []row.Tag{{Name: "a", Value: "1"}}
	key, err := row.EncodeSeries(nil, slices.Clone(tags))
	if err != nil {
		t.Fatal(err)
	}
	batch := func(vals ...float64) region.Batch {
		var b region.Batch
		for i, v := range vals {
			b.Points = append(b.Points, row.Point{Tags: tags, TS: int64(i), Fields: []row.Field{{Name: "v", Value: row.FloatValue(v)}}})
			b.Keys = append(b.Keys, key)
		}
		return b
	}
	for name, tc := range map[string]struct {
		vals    []float64
		maxSize int // bytes of the column's values, at most
	}{
		"integers":                {[]float64{1, 20, 300, -4000}, 1 + 2*4},
		"a scale raised later":    {[]float64{58, 58.3, 58.25, 0.001}, 1 + 3*4},
		"a NaN":                   {[]float64{1, math.NaN(), 2}, 1 + 8*3},
		"a staleness marker":      {[]float64{1, staleNaN}, 1 + 8*2},
		"-0":                      {[]float64{1, math.Copysign(0, -1)}, 1 + 8*2},
		"a long fraction":         {[]float64{0.5, 1.0 / 3}, 1 + 8*2},
		"past 2^50 at the scale":  {[]float64{0.1, 1e15}, 1 + 8*2},
		"infinities and integers": {[]float64{3, math.Inf(1), math.Inf(-1)}, 1 + 8*3},
	} {
		b := batch(tc.vals...)
		raw := Append(nil, b)
		withoutValues := Append(nil, batch(make([]float64, len(tc.vals))...))
		// The zeros' column is a scale byte and a byte a zero.
		if got := len(raw) - (len(withoutValues) - 1 - len(tc.vals)); got > tc.maxSize {
			t.Errorf("%s: %d bytes of values, want at most %d", name, got, tc.maxSize)
		}
		got, err := Decode(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := same(b, got); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A scale byte that is no scale.
	raw := Append(nil, batch(1))
	raw[len(raw)-2] = decimal.MaxScale + 1
	if _, err := Decode(raw); !errors.Is(err, ErrMalformed) {
		t.Errorf("scale %d: %v", decimal.MaxScale+1, err)
	}
}

// The encoder keeps no key of a batch it encoded (its memory is pooled
// with the sender's buffers), and Decode allocates for the points the
// bytes hold, not for the rows a batch declares.
func TestNoRetentionNoAmplification(t *testing.T) {
	tags := []row.Tag{{Name: "a", Value: "1"}}
	var long region.Batch
	for i := range 100 {
		k, err := row.EncodeSeries(nil, []row.Tag{{Name: "a", Value: fmt.Sprint(i)}})
		if err != nil {
			t.Fatal(err)
		}
		long.Points = append(long.Points, row.Point{Tags: tags, TS: int64(i), Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}})
		long.Keys = append(long.Keys, k)
	}
	// A run of 100 keys, then a run of one.
	long.Points = append(long.Points, row.Point{Tags: []row.Tag{{Name: "b", Value: "1"}}, TS: 1, Fields: []row.Field{{Name: "v", Value: row.FloatValue(1)}}})
	long.Keys = append(long.Keys, []byte("\x01b\x011"))
	enc := new(Encoder)
	enc.Append(nil, long, V2)
	for i, k := range enc.keys[:cap(enc.keys)] {
		if k != nil {
			t.Fatalf("the encoder still holds key %d: %q", i, k)
		}
	}

	// A megabyte of zeros after a header declaring a row a byte.
	data := append([]byte{V2}, binary.AppendUvarint(nil, 1<<20)...)
	data = append(data, 1) // a run
	data = append(data, make([]byte, 1<<20)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := Decode(data); !errors.Is(err, ErrMalformed) {
		t.Fatalf("zeros: %v", err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 16*uint64(len(data)) {
		t.Errorf("decoding %d bytes allocated %d", len(data), got)
	}
}

// checkKeyRef is checkKey's rule written plainly: the key decodes into
// tags whose names ascend, each once, each one of names, and whose values
// are not empty.
func checkKeyRef(key []byte, names []string) bool {
	tags, err := row.DecodeSeries(nil, string(key))
	if err != nil {
		return false
	}
	for i, tg := range tags {
		if tg.Value == "" || !slices.Contains(names, tg.Name) || (i > 0 && tags[i-1].Name >= tg.Name) {
			return false
		}
	}
	return true
}

// checkKey accepts exactly the keys checkKeyRef does: keys built from a
// few names (some the start of others; one of 130 bytes, whose length
// takes two bytes), in and out
// of order, repeated, outside the run's names, with empty values, cut
// short, with a length written in two bytes where one would do.
func TestCheckKey(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed))
	long := strings.Repeat("l", 130)
	pool := []string{"a", "ab", "b", "host", "hostname", "rack", "zone", long} // names that begin others
	appendLen := func(dst []byte, n int) []byte {
		if rng.IntN(20) == 0 && n < 0x80 {
			return append(dst, byte(n)|0x80, 0) // two bytes for a short length
		}
		return binary.AppendUvarint(dst, uint64(n))
	}
	for round := range 20000 {
		names := slices.Clone(pool[:1+rng.IntN(len(pool))])
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		names = names[:1+rng.IntN(len(names))]
		sort.Strings(names)
		var key []byte
		for range rng.IntN(5) {
			name := pool[rng.IntN(len(pool))]
			value := []string{"", "v", "host_12"}[rng.IntN(3)]
			key = appendLen(key, len(name))
			key = append(key, name...)
			key = appendLen(key, len(value))
			key = append(key, value...)
		}
		if len(key) > 0 && rng.IntN(10) == 0 {
			key = key[:rng.IntN(len(key))]
		}
		if got, want := checkKey(key, names) == nil, checkKeyRef(key, names); got != want {
			t.Fatalf("seed %d round %d: checkKey(%q, %q) accepts: %v, want %v", seed, round, key, names, got, want)
		}
	}
	// The keys EncodeSeries makes of the names themselves pass.
	for _, names := range [][]string{{"a"}, {"a", "host", long}, pool} {
		sorted := slices.Sorted(slices.Values(names))
		tags := make([]row.Tag, len(names))
		for i, n := range names {
			tags[i] = row.Tag{Name: n, Value: "x"}
		}
		key, err := row.EncodeSeries(nil, tags)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkKey(key, sorted); err != nil {
			t.Errorf("checkKey(%q, %q): %v", key, sorted, err)
		}
	}
}
