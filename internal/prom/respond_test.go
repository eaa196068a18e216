package prom

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"
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
