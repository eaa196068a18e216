package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
)

// The InfluxDB 1.x /query endpoint, for the calls clients make at start:
// bulk loaders run SHOW DATABASES (and parse the reply as JSON), Telegraf's
// InfluxDB output runs CREATE DATABASE. Strata has no databases (a write's
// db or bucket names nothing; its measurement is the table), so SHOW
// DATABASES lists none and CREATE DATABASE succeeds and creates nothing.
// Any other statement is refused with a 400 that points to PromQL.

type influxResult struct {
	StatementID int            `json:"statement_id"`
	Series      []influxSeries `json:"series,omitempty"`
}

type influxSeries struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
	Values  [][]any  `json:"values,omitempty"`
}

func (h *Handler) influxQuery(w http.ResponseWriter, r *http.Request) {
	q := r.FormValue("q") // the query string or a form body
	w.Header().Set("Content-Type", "application/json")
	var results []influxResult
	for i, stmt := range splitStatements(q) {
		words := strings.Fields(strings.ToUpper(stmt))
		switch {
		case len(words) == 2 && words[0] == "SHOW" && words[1] == "DATABASES":
			results = append(results, influxResult{StatementID: i, Series: []influxSeries{{Name: "databases", Columns: []string{"name"}}}})
		case len(words) >= 3 && words[0] == "CREATE" && words[1] == "DATABASE":
			results = append(results, influxResult{StatementID: i})
		default:
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "InfluxQL is not supported: Strata answers SHOW DATABASES and CREATE DATABASE only; query with PromQL at /api/v1/query (statement: " + strings.TrimSpace(stmt) + ")"})
			return
		}
	}
	if len(results) == 0 {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": `missing required parameter "q"`})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"results": results})
}

// splitStatements splits q on semicolons outside quotes and drops empty
// statements.
func splitStatements(q string) []string {
	var out []string
	var quote rune
	start := 0
	for i, c := range q {
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == ';':
			out = append(out, q[start:i])
			start = i + 1
		}
	}
	out = append(out, q[start:])
	kept := out[:0]
	for _, s := range out {
		if strings.TrimSpace(s) != "" {
			kept = append(kept, s)
		}
	}
	return kept
}
