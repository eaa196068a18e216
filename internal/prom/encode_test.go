package prom

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/stratadb/strata/internal/testseed"
)

// TestResultEncoding: a query's result is written as encoding/json wrote
// it from the generic form below (what the API used before), byte for
// byte, for random matrices, vectors, scalars and strings with label
// values and strings that need escaping, and special floats.
func TestResultEncoding(t *testing.T) {
	seed := int64(testseed.Seed(t))
	rng := rand.New(rand.NewSource(seed))
	pieces := []string{"a", "host_1", `"`, `\`, "\n", "\t", "\x00", "\x1f", "<", ">", "&", "é", "\u2028", "\u2029", "\xff", "\xe2\x82", "日本", " ", "\x7f", "\U0001F600"}
	str := func() string {
		var b []byte
		for range rng.Intn(6) {
			b = append(b, pieces[rng.Intn(len(pieces))]...)
		}
		return string(b)
	}
	floats := []float64{0, 1, -1, 0.1, 1e-300, 1e300, math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 57.1234}
	float := func() float64 {
		if rng.Intn(3) == 0 {
			return rng.NormFloat64() * math.Pow(10, float64(rng.Intn(40)-20))
		}
		return floats[rng.Intn(len(floats))]
	}
	ts := func() int64 { return rng.Int63n(4e12) - 1e12 }
	lbls := func() labels.Labels {
		b := labels.NewScratchBuilder(0)
		seen := map[string]bool{} // names are unique
		for range rng.Intn(5) {
			if n := str() + strconv.Itoa(rng.Intn(100)); !seen[n] {
				seen[n] = true
				b.Add(n, str())
			}
		}
		b.Sort()
		return b.Labels()
	}
	for round := range 2000 {
		var v parser.Value
		switch round % 4 {
		case 0:
			var m promql.Matrix
			for range rng.Intn(4) {
				s := promql.Series{Metric: lbls()}
				for range rng.Intn(5) {
					s.Floats = append(s.Floats, promql.FPoint{T: ts(), F: float()})
				}
				m = append(m, s)
			}
			v = m
		case 1:
			var vec promql.Vector
			for range rng.Intn(4) {
				vec = append(vec, promql.Sample{Metric: lbls(), T: ts(), F: float()})
			}
			v = vec
		case 2:
			v = promql.Scalar{T: ts(), V: float()}
		case 3:
			v = promql.String{T: ts(), V: str()}
		}
		got := httptest.NewRecorder()
		respondValue(got, v)
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": v.Type(), "result": encodeValue(v)}}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Body.Bytes(), want.Bytes()) {
			t.Fatalf("round %d:\ngot  %s\nwant %s", round, got.Body.Bytes(), want.Bytes())
		}
		if ct := got.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
	}
}

// sampleJSON, formatFloat and encodeValue are the generic form the API
// wrote through encoding/json. sampleJSON is [seconds, "value"].
func sampleJSON(t int64, v float64) [2]any {
	return [2]any{json.Number(strconv.FormatFloat(float64(t)/1000, 'f', -1, 64)), formatFloat(v)}
}

func formatFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func encodeValue(v parser.Value) any {
	switch v := v.(type) {
	case promql.Scalar:
		return sampleJSON(v.T, v.V)
	case promql.String:
		return [2]any{json.Number(strconv.FormatFloat(float64(v.T)/1000, 'f', -1, 64)), v.V}
	case promql.Vector:
		out := make([]map[string]any, 0, len(v))
		for _, s := range v {
			out = append(out, map[string]any{"metric": s.Metric.Map(), "value": sampleJSON(s.T, s.F)})
		}
		return out
	case promql.Matrix:
		out := make([]map[string]any, 0, len(v))
		for _, s := range v {
			vals := make([][2]any, len(s.Floats))
			for i, p := range s.Floats {
				vals[i] = sampleJSON(p.T, p.F)
			}
			out = append(out, map[string]any{"metric": s.Metric.Map(), "values": vals})
		}
		return out
	}
	return nil
}
