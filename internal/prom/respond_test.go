package prom

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"unsafe"
)

// A list of strings is written byte for byte as encoding/json writes the
// answer, whatever its strings hold.
func TestRespondStringsAsEncodingJSON(t *testing.T) {
	for _, vs := range [][]string{
		{},
		{"up"},
		{"a", "b_c:d", "with space", "quote\"", `back\slash`, "<html>&", "tab\t", "nl\n", "\x00\x1f\x7f", "ünïcode", "\u2028\u2029", "bad\xff utf8", ""},
	} {
		rec := httptest.NewRecorder()
		respond(rec, vs)
		var want bytes.Buffer
		_ = json.NewEncoder(&want).Encode(map[string]any{"status": "success", "data": vs})
		if got := rec.Body.String(); got != want.String() {
			t.Errorf("%q:\n got %s\nwant %s", vs, got, want.String())
		}
	}
}

// BenchmarkRespondNames: /api/v1/label/__name__/values' answer of
// 100,000 metric names.
func BenchmarkRespondNames(b *testing.B) {
	names := make([]string, 100_000)
	for i := range names {
		names[i] = fmt.Sprintf("avalanche_metric_mmmmm_%05d", i)
	}
	for b.Loop() {
		respond(httptest.NewRecorder(), names)
	}
}

// BenchmarkRespondNamesJSON: the same answer through encoding/json.
func BenchmarkRespondNamesJSON(b *testing.B) {
	names := make([]string, 100_000)
	for i := range names {
		names[i] = fmt.Sprintf("avalanche_metric_mmmmm_%05d", i)
	}
	for b.Loop() {
		_ = json.NewEncoder(httptest.NewRecorder()).Encode(map[string]any{"status": "success", "data": names})
	}
}

// BenchmarkAppendStrings: the encoding alone.
func BenchmarkAppendStrings(b *testing.B) {
	names := make([]string, 100_000)
	for i := range names {
		names[i] = fmt.Sprintf("avalanche_metric_mmmmm_%05d", i)
	}
	for b.Loop() {
		appendStrings(names)
	}
}

// A long list answered again, the same slice, is written from the kept
// body; a slice of it, or an equal list elsewhere, is encoded anew, and
// every body is what encoding/json writes.
func TestRespondKeepsTheBodyOfTheSameList(t *testing.T) {
	names := make([]string, 2*minKeptBody)
	for i := range names {
		names[i] = fmt.Sprintf("metric_%05d", i)
	}
	body := func(vs []string) []byte {
		t.Helper()
		rec := httptest.NewRecorder()
		respond(rec, vs)
		var want bytes.Buffer
		_ = json.NewEncoder(&want).Encode(map[string]any{"status": "success", "data": vs})
		if !bytes.Equal(rec.Body.Bytes(), want.Bytes()) {
			t.Fatalf("%d names: the body is not encoding/json's", len(vs))
		}
		return stringsBody(vs)
	}
	first := body(names)
	if again := body(names); unsafe.SliceData(again) != unsafe.SliceData(first) {
		t.Fatal("the same list was encoded again")
	}
	if short := body(names[:len(names)-1]); unsafe.SliceData(short) == unsafe.SliceData(first) {
		t.Fatal("a shorter slice of the list got its body")
	}
	if other := body(slices.Clone(names)); unsafe.SliceData(other) == unsafe.SliceData(first) {
		t.Fatal("another list got the kept body")
	}
}
