package region

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/klauspost/compress/s2"

	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/wal"
	"github.com/stratadb/strata/internal/walstream"
)

// A forwarded batch's encoding, for the region's tests: the region takes
// any (Options.DecodeForwarded; a datanode's is internal/fwdbatch, which
// this package's tests cannot import). Each point: its key, ts, and each
// field's name, kind and payload.
func encodeForwarded(points []row.Point, keys [][]byte) []byte {
	var b []byte
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	b = binary.AppendUvarint(b, uint64(len(points)))
	for i, p := range points {
		str(string(keys[i]))
		b = binary.AppendVarint(b, p.TS)
		b = binary.AppendUvarint(b, uint64(len(p.Tags)))
		for _, t := range p.Tags {
			str(t.Name)
		}
		b = binary.AppendUvarint(b, uint64(len(p.Fields)))
		for _, f := range p.Fields {
			str(f.Name)
			b = append(b, byte(f.Value.Kind()))
			if f.Value.Kind() == row.String {
				str(f.Value.Str())
			} else {
				b = binary.AppendUvarint(b, f.Value.Bits())
			}
		}
	}
	return s2.Encode(nil, b)
}

func decodeForwarded(data []byte) ([]row.Point, [][]byte, error) {
	bad := errors.New("malformed test batch")
	uv := func() uint64 {
		v, n := binary.Uvarint(data)
		if n <= 0 {
			panic(bad)
		}
		data = data[n:]
		return v
	}
	str := func() string {
		n := uv()
		if n > uint64(len(data)) {
			panic(bad)
		}
		s := string(data[:n])
		data = data[n:]
		return s
	}
	var points []row.Point
	var keys [][]byte
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = bad
			}
		}()
		for range uv() {
			keys = append(keys, []byte(str()))
			ts, n := binary.Varint(data)
			if n <= 0 {
				return bad
			}
			data = data[n:]
			p := row.Point{TS: ts}
			for range uv() {
				p.Tags = append(p.Tags, row.Tag{Name: str()})
			}
			for range uv() {
				name := str()
				k := row.Kind(data[0])
				data = data[1:]
				var v row.Value
				switch k {
				case row.String:
					v = row.StringValue(str())
				case row.Bool:
					v = row.BoolValue(uv() == 1)
				default:
					v = row.NumberValue(k, uv())
				}
				p.Fields = append(p.Fields, row.Field{Name: name, Value: v})
			}
			points = append(points, p)
		}
		if len(data) != 0 {
			return bad
		}
		return nil
	}()
	return points, keys, err
}

// forwardedBatch is points as a datanode forwards them: keys encoded, and
// the whole in the forwarded encoding.
func forwardedBatch(t testing.TB, points []row.Point) Batch {
	t.Helper()
	keys := make([][]byte, len(points))
	for i, p := range points {
		k, err := row.EncodeSeries(nil, p.Tags)
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = k
	}
	return Batch{Points: points, Keys: keys, Encoded: encodeForwarded(points, keys)}
}

// TestForwardedBatchReplaysAsWritten: a forwarded batch goes into the WAL
// as it came, and a reopened region, which replays it by its schema, holds
// what the region held before, for batches of every shape (sparse fields,
// columns added by the batch itself, every kind, NaN and staleness bits),
// next to plain writes in the same segments.
func TestForwardedBatchReplaysAsWritten(t *testing.T) {
	ctx := context.Background()
	store := objstoretest.Mem(t)
	opts := Options{DecodeForwarded: decodeForwarded}
	r := open(t, store, opts)
	h := func(n int) []row.Tag { return []row.Tag{{Name: "host", Value: fmt.Sprint("h", n)}} }
	batches := [][]row.Point{
		{{Tags: h(1), TS: 10, Fields: []row.Field{{Name: "a", Value: row.FloatValue(1.5)}}}},
		{ // a new column, sparse rows, every kind
			{Tags: h(1), TS: 20, Fields: []row.Field{{Name: "b", Value: row.IntValue(-7)}, {Name: "a", Value: row.FloatValue(math.NaN())}}},
			{Tags: h(2), TS: 20, Fields: []row.Field{{Name: "s", Value: row.StringValue("x y")}}},
			{Tags: h(2), TS: 30, Fields: []row.Field{{Name: "u", Value: row.UintValue(math.MaxUint64)}, {Name: "t", Value: row.BoolValue(true)}}},
			{Tags: nil, TS: 40, Fields: []row.Field{{Name: "a", Value: row.NumberValue(row.Float, 0x7ff0000000000002)}}},
		},
		{{Tags: h(3), TS: 50, Fields: []row.Field{{Name: "t", Value: row.BoolValue(false)}, {Name: "a", Value: row.FloatValue(-0.25)}, {Name: "b", Value: row.IntValue(3)}}}},
	}
	for i, pts := range batches {
		if _, err := r.WriteBatch(ctx, forwardedBatch(t, slices.Clone(pts))); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		// and a plain write between them
		if _, err := r.Write(ctx, []row.Point{{Tags: h(9), TS: int64(i), Fields: []row.Field{{Name: "a", Value: row.FloatValue(float64(i))}}}}); err != nil {
			t.Fatal(err)
		}
	}
	before := scanAll(t, r, scan.Request{})
	if len(before) != 9 {
		t.Fatalf("%d rows before the reopen, want 9:\n%s", len(before), before)
	}
	closeRegion(t, r, false) // no flush: what the reopen holds comes from the WAL
	mixed := 0
	objs, err := objstore.ListAll(ctx, store, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		data, err := store.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		if seg, err := walstream.Decode(0, data); err == nil {
			for _, b := range seg.Blocks {
				if b.Codec == wal.CodecMixed {
					mixed++
				}
			}
		}
	}
	if mixed == 0 {
		t.Fatal("no WAL block holds a forwarded chunk")
	}
	r = open(t, store, opts)
	if after := scanAll(t, r, scan.Request{}); !slices.Equal(after, before) {
		t.Fatalf("after the reopen:\n%s\nbefore:\n%s", after, before)
	}
	closeRegion(t, r, false)

	// Without a decoder the WAL cannot be replayed: the open fails and
	// says why, rather than losing the batches.
	if _, err := Open(ctx, store, testRegion, Options{}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("forwarded chunk")) {
		t.Fatalf("open without a decoder: %v, want an error about the forwarded chunk", err)
	}
}

// TestForwardedBatchWithExpiredPoints: a batch some of whose points the
// region drops (past its TTL) is not the batch that came: the WAL gets the
// entries' own encoding, and a reopen holds exactly the rows kept.
func TestForwardedBatchWithExpiredPoints(t *testing.T) {
	ctx := context.Background()
	store := objstoretest.Mem(t)
	opts := Options{DecodeForwarded: decodeForwarded, TTL: 1000 * time.Hour}
	r := open(t, store, opts)
	now := r.ttlCutoff() + int64(1e12)
	pts := []row.Point{
		{Tags: []row.Tag{{Name: "host", Value: "old"}}, TS: 1, Fields: []row.Field{{Name: "a", Value: row.FloatValue(1)}}},
		{Tags: []row.Tag{{Name: "host", Value: "new"}}, TS: now, Fields: []row.Field{{Name: "a", Value: row.FloatValue(2)}}},
	}
	res, err := r.WriteBatch(ctx, forwardedBatch(t, pts))
	if err != nil || res.Written != 1 || res.Expired != 1 {
		t.Fatalf("write: %+v, %v; want 1 written and 1 expired", res, err)
	}
	before := scanAll(t, r, scan.Request{})
	closeRegion(t, r, false)
	r = open(t, store, Options{TTL: opts.TTL}) // no decoder needed: nothing forwarded went in as it came
	if after := scanAll(t, r, scan.Request{}); !slices.Equal(after, before) || len(after) != 1 {
		t.Fatalf("after the reopen:\n%s\nbefore:\n%s", after, before)
	}
	closeRegion(t, r, false)
}
