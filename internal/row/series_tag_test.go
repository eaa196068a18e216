package row

import (
	"testing"
)

func TestInsertAndRemoveSeriesTag(t *testing.T) {
	id := Tag{Name: " ", Value: "17"}
	for _, tags := range [][]Tag{
		nil,
		{{"host", "a"}},
		{{"A", "x"}, {"host", "a"}},
		{{"A", "x"}, {"Z", "y"}, {"_", "z"}, {"a", "b"}, {"zz", "c"}},
		{{"___", "x"}, {"__u", "y"}},
	} {
		key, err := EncodeSeries(nil, append([]Tag(nil), tags...))
		if err != nil {
			t.Fatal(err)
		}
		want, err := EncodeSeries(nil, append(append([]Tag(nil), tags...), id))
		if err != nil {
			t.Fatal(err)
		}
		got, err := InsertSeriesTag([]byte("prefix"), key, id)
		if err != nil || string(got) != "prefix"+string(want) {
			t.Fatalf("%v: insert gives %q, want %q (%v)", tags, got, want, err)
		}
		if back := RemoveSeriesTag(string(want), id.Name); back != string(key) {
			t.Fatalf("%v: remove gives %q, want %q", tags, back, key)
		}
		if same := RemoveSeriesTag(string(key), id.Name); same != string(key) {
			t.Fatalf("%v: remove of an absent tag changed the key", tags)
		}
	}
	key, _ := EncodeSeries(nil, []Tag{id})
	if _, err := InsertSeriesTag(nil, key, id); err == nil {
		t.Fatal("a second tag of one name was inserted")
	}
}
