package auth

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

func TestHTTP(t *testing.T) {
	tok := New("s3cret")
	h := tok.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	try := func(path string, set func(*http.Request)) int {
		r := httptest.NewRequest("POST", path, nil)
		if set != nil {
			set(r)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	hdr := func(v string) func(*http.Request) { return func(r *http.Request) { r.Header.Set("Authorization", v) } }
	basic := base64.StdEncoding.EncodeToString([]byte("user:s3cret"))
	for name, c := range map[string]struct {
		path string
		set  func(*http.Request)
		want int
	}{
		"token":        {"/api/v2/write", hdr("Token s3cret"), 204},
		"bearer":       {"/write", hdr("Bearer s3cret"), 204},
		"basic":        {"/write", hdr("Basic " + basic), 204},
		"v1 password":  {"/write?db=x&u=a&p=s3cret", nil, 204},
		"none":         {"/write", nil, 401},
		"wrong":        {"/write", hdr("Token nope"), 401},
		"prefix":       {"/write", hdr("Token s3cre"), 401},
		"health open":  {"/health", nil, 204},
		"ping open":    {"/ping", nil, 204},
		"metrics auth": {"/metrics", nil, 401},
	} {
		if got := try(c.path, c.set); got != c.want {
			t.Errorf("%s: %d, want %d", name, got, c.want)
		}
	}
	// A browser (the web UI) is asked for Basic credentials; an API
	// client, for a token.
	for accept, want := range map[string]string{"text/html,application/xhtml+xml": "Basic", "application/json": "Token", "": "Token"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Accept", accept)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got := w.Header().Get("WWW-Authenticate"); w.Code != 401 || !strings.HasPrefix(got, want+" ") {
			t.Errorf("Accept %q: %d %q, want 401 and a %s challenge", accept, w.Code, got, want)
		}
	}
	if s := fmt.Sprint(tok); s != "[redacted]" {
		t.Fatalf("a token prints as %q", s)
	}
	open := Token{}.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	w := httptest.NewRecorder()
	open.ServeHTTP(w, httptest.NewRequest("POST", "/write", nil))
	if w.Code != 204 {
		t.Fatalf("without a token configured: %d", w.Code)
	}
}

func TestGRPC(t *testing.T) {
	tok := New("s3cret")
	g := grpc.NewServer(tok.ServerOptions()...)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	defer g.Stop()
	call := func(opts ...grpc.DialOption) (health, list error) {
		conn, err := grpc.NewClient(ln.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := healthpb.NewHealthClient(conn)
		_, health = c.Check(context.Background(), &healthpb.HealthCheckRequest{})
		// Reflection stands for every other service (a stream call).
		st, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
		if err == nil {
			// A refused stream's status comes from Recv (Send says io.EOF).
			_ = st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
			_, err = st.Recv()
		}
		list = err
		return
	}
	h, l := call()
	if h != nil || status.Code(l) != codes.Unauthenticated {
		t.Fatalf("without a token: health %v, call %v", h, l)
	}
	_, l = call(New("wrong").DialOptions()...)
	if status.Code(l) != codes.Unauthenticated {
		t.Fatalf("with a wrong token: %v", l)
	}
	_, l = call(tok.DialOptions()...)
	if l != nil {
		t.Fatalf("with the token: %v", l)
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(p, []byte("  abc \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := Load(p); err != nil || !tok.Match("abc") {
		t.Fatalf("load: %v", err)
	}
	if err := os.WriteFile(p, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil {
		t.Fatal("an empty token file was accepted")
	}
	if _, err := Load(p + ".missing"); err == nil {
		t.Fatal("a missing token file was accepted")
	}
	t.Setenv("STRATA_AUTH_TOKEN", "fromenv")
	if tok, _ := Load(""); !tok.Match("fromenv") {
		t.Fatal("the environment's token was not used")
	}
}

func TestLoadTenants(t *testing.T) {
	dir := t.TempDir()
	file := func(body string) string {
		p := filepath.Join(dir, fmt.Sprint(len(body), ".tokens"))
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := LoadTenants(file("# tokens\n\nt1 a\nt2 b,a,b federate\n  t3  c  \n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Binding{"t1": {Tenants: []string{"a"}}, "t2": {Tenants: []string{"a", "b"}, Federate: true}, "t3": {Tenants: []string{"c"}}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for body, why := range map[string]string{
		"t1\n":              "line 1: want TOKEN",
		"t1 a federate x\n": "line 1: want TOKEN",
		"t1 a/b\n":          "invalid tenant",
		"t1 a,\n":           "invalid tenant",
		"t1 a fed\n":        `the third field is "fed"`,
		"t1 a\nt1 b\n":      "line 2: the token is on an earlier line too",
		"# nothing\n":       "holds no token",
	} {
		if _, err := LoadTenants(file(body)); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v, want %q", body, err, why)
		}
	}
	if _, err := LoadTenants(filepath.Join(dir, "none")); err == nil {
		t.Error("a missing file: no error")
	}
	if _, err := New("").WithTenants(file("t1 a\n")); err == nil || !strings.Contains(err.Error(), "needs the cluster's auth token") {
		t.Errorf("tenants' tokens without the cluster's: %v", err)
	}
	if _, err := New("t1").WithTenants(file("t1 a\n")); err == nil || !strings.Contains(err.Error(), "is the cluster's token") {
		t.Errorf("a tenant's token that is the cluster's: %v", err)
	}
	if tok, err := New("s").WithTenants(""); err != nil || len(tok.tenants) != 0 {
		t.Errorf("no file: %v, %v", tok, err)
	}
	tok, err := New("s").WithTenants(file("t1 a\n"))
	if err != nil {
		t.Fatal(err)
	}
	if b, ok := tok.bound("t1"); !ok || b.Tenants[0] != "a" {
		t.Errorf("t1: %v %v", b, ok)
	}
	if tok.Match("t1") {
		t.Error("a tenant's token matches the cluster's")
	}
}

// TestTenantHTTP: what a tenant's token may name over HTTP, and the
// header the request goes on with.
func TestTenantHTTP(t *testing.T) {
	tok := New("s").NewTenant("ta", Binding{Tenants: []string{"a"}}).NewTenant("tab", Binding{Tenants: []string{"b", "a"}, Federate: true})
	var seen string
	var bound bool
	h := tok.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Get("X-Scope-OrgID")
		_, bound = BoundTenants(r.Context())
		w.WriteHeader(204)
	}))
	for _, c := range []struct {
		tok, h   string
		code     int
		seen     string
		bound    bool
		contains string
	}{
		{"ta", "", 204, "a", true, ""},
		{"ta", "a", 204, "a", true, ""},
		{"ta", "b", 403, "", false, "may not name tenant b"},
		{"ta", "a|b", 403, "", false, "may not name tenant b"},
		{"ta", "a/b", 400, "", false, "invalid tenant"},
		{"tab", "", 400, "", false, "name one"},
		{"tab", "b|a", 204, "b|a", true, ""},
		{"s", "anyone|else", 204, "anyone|else", false, ""},
		{"s", "", 204, "", false, ""},
	} {
		seen, bound = "", false
		r := httptest.NewRequest("GET", "/api/v1/query", nil)
		r.Header.Set("Authorization", "Bearer "+c.tok)
		if c.h != "" {
			r.Header.Set("X-Scope-OrgID", c.h)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code || seen != c.seen || bound != c.bound || !strings.Contains(w.Body.String(), c.contains) {
			t.Errorf("%s as %q: %d %q (header %q, bound %v), want %d %q (%q, %v)", c.tok, c.h, w.Code, w.Body.String(), seen, bound, c.code, c.contains, c.seen, c.bound)
		}
	}
}

// The node's own paths show or change every tenant's (metrics name each
// tenant, profiles, a reload of the rule files): the cluster's token only.
func TestTenantHTTPOperatorPaths(t *testing.T) {
	tok := New("s").NewTenant("ta", Binding{Tenants: []string{"a"}})
	h := tok.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	for _, c := range []struct {
		tok, method, path string
		code              int
	}{
		{"ta", "GET", "/metrics", 403},
		{"ta", "GET", "/debug/pprof/heap", 403},
		{"ta", "POST", "/-/reload", 403},
		{"ta", "GET", "/api/v1/query", 204},
		{"s", "GET", "/metrics", 204},
		{"s", "GET", "/debug/pprof/heap", 204},
		{"s", "POST", "/-/reload", 204},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		r.Header.Set("Authorization", "Bearer "+c.tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.code || c.code == 403 && !strings.Contains(w.Body.String(), "the operator's") {
			t.Errorf("%s %s with %s: %d %s, want %d", c.method, c.path, c.tok, w.Code, w.Body.String(), c.code)
		}
	}
}
