package row

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stratadb/strata/internal/testseed"
)

func TestSeriesKeyRoundTripAndOrder(t *testing.T) {
	tags := []Tag{{Name: "zone", Value: "b"}, {Name: "host", Value: "h,1=x"}, {Name: "empty", Value: ""}}
	key, err := EncodeSeries(nil, tags)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSeries(nil, string(key))
	if err != nil {
		t.Fatal(err)
	}
	want := []Tag{{Name: "host", Value: "h,1=x"}, {Name: "zone", Value: "b"}}
	if !slices.Equal(got, want) {
		t.Fatalf("decoded %v, want %v (sorted, empty tag dropped)", got, want)
	}
	if v := SeriesTag(string(key), "zone"); v != "b" {
		t.Fatalf("SeriesTag zone = %q", v)
	}
	if v := SeriesTag(string(key), "nope"); v != "" {
		t.Fatalf("SeriesTag nope = %q", v)
	}
	// The same tags in another order give the same key.
	key2, _ := EncodeSeries(nil, []Tag{{Name: "host", Value: "h,1=x"}, {Name: "zone", Value: "b"}})
	if string(key) != string(key2) {
		t.Fatal("key depends on tag order")
	}
	if _, err := EncodeSeries(nil, []Tag{{Name: "a", Value: "1"}, {Name: "a", Value: "2"}}); err == nil {
		t.Fatal("duplicate tag accepted")
	}
	if _, err := DecodeSeries(nil, "\x05ab"); !errors.Is(err, ErrBadSeries) {
		t.Fatalf("truncated key: %v", err)
	}
	if k, _ := EncodeSeries(nil, nil); len(k) != 0 || FormatSeries("") != "" {
		t.Fatal("empty tag set")
	}
}

func TestValuesAndOrder(t *testing.T) {
	vals := []Value{FloatValue(-0.5), IntValue(math.MinInt64), UintValue(math.MaxUint64), StringValue("x"), BoolValue(true), {}}
	kinds := []Kind{Float, Int, Uint, String, Bool, Null}
	for i, v := range vals {
		if v.Kind() != kinds[i] || !v.Equal(vals[i]) || (i > 0 && v.Equal(vals[i-1])) {
			t.Fatalf("value %d: %v kind %v", i, v, v.Kind())
		}
		if k, ok := ParseKind(kinds[i].String()); kinds[i] != Null && (!ok || k != kinds[i]) {
			t.Fatalf("ParseKind(%q) = %v %v", kinds[i].String(), k, ok)
		}
	}
	if _, ok := ParseKind("null"); ok {
		t.Fatal("null is not a column type")
	}
	if vals[0].Float() != -0.5 || vals[1].Int() != math.MinInt64 || vals[2].Uint() != math.MaxUint64 || vals[3].Str() != "x" || !vals[4].Bool() || !vals[5].IsNull() {
		t.Fatal("accessors")
	}
	a := Entry{Series: "a", TS: 5, Seq: 1}
	b := Entry{Series: "a", TS: 5, Seq: 2}
	c := Entry{Series: "a", TS: 6, Seq: 0}
	d := Entry{Series: "b", TS: -100, Seq: 0}
	// (series, ts, seq desc)
	for _, p := range [][2]*Entry{{&b, &a}, {&a, &c}, {&c, &d}} {
		if !Less(p[0], p[1]) || Less(p[1], p[0]) {
			t.Fatalf("order of %v and %v", p[0], p[1])
		}
	}
	if (&Entry{Fields: []Value{IntValue(1)}}).Field(3).Kind() != Null {
		t.Fatal("a missing field is null")
	}
}

// A SeriesEncoder gives EncodeSeries' keys and errors for runs of tag
// sets whose names repeat, change order, change count and hold
// duplicates, and leaves the tags as given.
func TestSeriesEncoderMatchesEncodeSeries(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	names := []string{"host", "region", "az", "rack", "os", "a", "zz"}
	var enc SeriesEncoder
	var tags []Tag
	for i := range 2000 {
		if i == 0 || rng.IntN(10) == 0 { // a new list of names
			tags = tags[:0]
			for range rng.IntN(6) {
				tags = append(tags, Tag{Name: names[rng.IntN(len(names))]})
			}
		}
		for j := range tags {
			tags[j].Value = []string{"", "x", "y", "long value"}[rng.IntN(4)]
		}
		given := slices.Clone(tags)
		got, gotErr := enc.Append([]byte("prefix"), tags)
		want, wantErr := EncodeSeries([]byte("prefix"), slices.Clone(tags))
		if (gotErr == nil) != (wantErr == nil) || gotErr == nil && !bytes.Equal(got, want) {
			t.Fatalf("point %d, tags %v: got %q, %v; want %q, %v", i, given, got, gotErr, want, wantErr)
		}
		if !slices.Equal(tags, given) {
			t.Fatalf("point %d: tags changed to %v", i, tags)
		}
	}
}
