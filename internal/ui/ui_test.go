package ui_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/ui"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

func get(t *testing.T, h http.Handler, path string) (*http.Response, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	resp := w.Result()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// TestServe: the page, its files with their types, and the JSON
// endpoints without a metasrv and with one that fails.
func TestServe(t *testing.T) {
	mux := http.NewServeMux()
	ui.Register(mux, ui.Options{})
	for path, want := range map[string]string{"/": "text/html", "/ui/app.js": "javascript", "/ui/style.css": "text/css"} {
		resp, body := get(t, mux, path)
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), want) || body == "" {
			t.Errorf("GET %s: %d %q (%d bytes), want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body), want)
		}
	}
	if resp, _ := get(t, mux, "/nothing"); resp.StatusCode != 404 {
		t.Errorf("GET /nothing: %d, want 404", resp.StatusCode)
	}
	if resp, body := get(t, mux, "/ui/api/cluster"); resp.StatusCode != 404 || !strings.Contains(body, "no metasrv") {
		t.Errorf("cluster without a metasrv: %d %s", resp.StatusCode, body)
	}

	if _, body := get(t, mux, "/ui/api/node"); !strings.Contains(body, `"datanode"`) {
		t.Errorf("a datanode's role: %s", body)
	}
	mux = http.NewServeMux()
	ui.Register(mux, ui.Options{Metasrv: true})
	if _, body := get(t, mux, "/ui/api/node"); !strings.Contains(body, `"metasrv"`) {
		t.Errorf("a metasrv's role: %s", body)
	}

	mux = http.NewServeMux()
	ui.Register(mux, ui.Options{Admin: func(context.Context) (pb.MetaAdminClient, error) { return nil, errors.New("no leader") }})
	resp, body := get(t, mux, "/ui/api/tables")
	var got struct{ Errors map[string]string }
	if err := json.Unmarshal([]byte(body), &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("tables: %d %s (%v)", resp.StatusCode, body, err)
	}
	if got.Errors["tables"] != "no leader" || got.Errors["regions"] != "no leader" {
		t.Fatalf("tables' errors: %v", got.Errors)
	}
}
