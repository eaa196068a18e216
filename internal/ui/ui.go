// Package ui is the web UI every datanode and standalone serves at `/`
// (docs/ui.md): plain HTML, CSS and ES modules embedded in the binary,
// which call the node's HTTP API (the Prometheus API, /api/v1/rules and
// /api/v1/alerts) and two JSON endpoints of its own, /ui/api/cluster and
// /ui/api/tables, which ask metasrv's admin API. Nothing is fetched from
// outside: no CDN, no build step.
package ui

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/tenant"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

//go:embed static
var static embed.FS

// Options configure the UI.
type Options struct {
	// Admin returns a client of metasrv's admin API, for the cluster and
	// tables pages (nil: those pages say there is none).
	Admin func(ctx context.Context) (pb.MetaAdminClient, error)
	// Timeout bounds one page's calls to metasrv (default 10 s).
	Timeout time.Duration
	// Metasrv says the UI is a metasrv replica's: it has no query API, so
	// the page shows only the cluster and tables pages.
	Metasrv bool
}

// Register adds the UI's routes to mux: the page at `/`, its files under
// /ui/, and its JSON endpoints under /ui/api/ (node: the node's role;
// cluster and tables: metasrv's answers).
func Register(mux *http.ServeMux, o Options) {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		panic(err)
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(index)
	})
	fileServer := http.StripPrefix("/ui/", http.FileServerFS(files))
	mux.Handle("GET /ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The files change with the binary: a browser asks again (and
		// gets 304 while they have not changed).
		w.Header().Set("Cache-Control", "no-cache")
		fileServer.ServeHTTP(w, r)
	}))
	a := &api{o: o}
	role := []byte(`{"role":"datanode"}` + "\n")
	if o.Metasrv {
		role = []byte(`{"role":"metasrv"}` + "\n")
	}
	mux.HandleFunc("GET /ui/api/node", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(role)
	})
	mux.HandleFunc("GET /ui/api/cluster", a.cluster)
	mux.HandleFunc("GET /ui/api/tables", a.tables)
}

type api struct{ o Options }

// part is one admin call's answer in a page's JSON: its message, or the
// error it ended with (a page shows what it could get).
type part struct {
	msg proto.Message
	err error
}

var marshal = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

func (a *api) serve(w http.ResponseWriter, r *http.Request, calls map[string]func(context.Context, pb.MetaAdminClient) (proto.Message, error)) {
	ctx, cancel := context.WithTimeout(r.Context(), a.o.Timeout)
	defer cancel()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if a.o.Admin == nil {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"this node has no metasrv to ask"}` + "\n"))
		return
	}
	// The node asks metasrv with the cluster's token: a tenant's token
	// (docs/tenants.md) sees none of the cluster's views, which span
	// every tenant; the tables shown are the request's tenant's.
	if _, bound := auth.BoundTenants(r.Context()); bound {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error":"the cluster's views take the cluster's token, not a tenant's"}` + "\n"))
		return
	}
	t, err := tenant.One(r.Header.Get(tenant.Header))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		b, _ := json.Marshal(map[string]string{"error": err.Error()})
		_, _ = w.Write(append(b, '\n'))
		return
	}
	ctx = tenant.Outgoing(ctx, t)
	c, err := a.o.Admin(ctx)
	parts := make(map[string]part, len(calls))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, call := range calls {
		if err != nil {
			parts[name] = part{err: err}
			continue
		}
		wg.Go(func() {
			m, err := call(ctx, c)
			mu.Lock()
			parts[name] = part{m, err}
			mu.Unlock()
		})
	}
	wg.Wait()
	_, _ = w.Write(encode(parts))
}

// encode writes {"name": message, ..., "errors": {"name": "message"}}.
func encode(parts map[string]part) []byte {
	out := map[string]any{}
	errs := map[string]string{}
	for name, p := range parts {
		if p.err == nil {
			var m []byte
			if m, p.err = marshal.Marshal(p.msg); p.err == nil {
				out[name] = json.RawMessage(m)
			}
		}
		if p.err != nil {
			errs[name] = p.err.Error()
		}
	}
	out["errors"] = errs
	b, _ := json.Marshal(out) // raw messages protojson wrote, and strings
	return append(b, '\n')
}

func (a *api) cluster(w http.ResponseWriter, r *http.Request) {
	a.serve(w, r, map[string]func(context.Context, pb.MetaAdminClient) (proto.Message, error){
		"status": func(ctx context.Context, c pb.MetaAdminClient) (proto.Message, error) {
			return c.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
		},
		"regions": func(ctx context.Context, c pb.MetaAdminClient) (proto.Message, error) {
			return c.ListRegions(ctx, &pb.ListRegionsRequest{})
		},
		"gc": func(ctx context.Context, c pb.MetaAdminClient) (proto.Message, error) {
			return c.GcStatus(ctx, &pb.GcStatusRequest{})
		},
	})
}

func (a *api) tables(w http.ResponseWriter, r *http.Request) {
	a.serve(w, r, map[string]func(context.Context, pb.MetaAdminClient) (proto.Message, error){
		"tables": func(ctx context.Context, c pb.MetaAdminClient) (proto.Message, error) {
			return c.ListTables(ctx, &pb.ListTablesRequest{})
		},
		"regions": func(ctx context.Context, c pb.MetaAdminClient) (proto.Message, error) {
			return c.ListRegions(ctx, &pb.ListRegionsRequest{})
		},
	})
}
