package scan

import (
	"strconv"
	"testing"
	"unsafe"

	"github.com/stratadb/strata/internal/row"
)

// The pairs of one label name share the name's bytes, so a walk of a
// million pairs ranking them by name compares pointers (prom's
// /api/v1/status/tsdb), and the counts stay exact.
func TestCounterSharesLabelNames(t *testing.T) {
	c := NewCounter(true)
	for i := range 100 {
		key, err := row.EncodeSeries(nil, []row.Tag{{Name: "id", Value: strconv.Itoa(i)}, {Name: "job", Value: "j" + strconv.Itoa(i%3)}})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // a key again counts once
			if err := c.Add(string(key)); err != nil {
				t.Fatal(err)
			}
		}
	}
	g := c.Groups[""]
	if g == nil || g.Series != 100 {
		t.Fatalf("counted %+v, want 100 series", g)
	}
	data := map[string]*byte{}
	values := map[string]int{}
	g.Each(func(tag row.Tag, n int64) {
		p := unsafe.StringData(tag.Name)
		if q, ok := data[tag.Name]; ok && q != p {
			t.Errorf("pairs of %s hold the name apart", tag.Name)
		}
		data[tag.Name] = p
		values[tag.Name]++
		if want := map[string]int64{"id": 1, "job": 0}[tag.Name]; want > 0 && n != want {
			t.Errorf("%s=%s: %d series, want %d", tag.Name, tag.Value, n, want)
		}
	})
	if values["id"] != 100 || values["job"] != 3 {
		t.Fatalf("values %v, want 100 ids and 3 jobs", values)
	}
	if labelName("job") != "job" || unsafe.StringData(labelName("job")) != data["job"] {
		t.Fatal("the name is not the one interned")
	}
}
