// Package auth is Strata's token authentication: every gRPC call (except
// health checks) and every HTTP request (except /health and /ping) must
// carry the cluster's token, or a tenant's token (a tokens file,
// LoadTenants; docs/tenants.md). The cluster's token may do anything and
// name any tenant; a tenant's token may name only its tenants, in the
// X-Scope-OrgID header or the x-scope-orgid metadata (else 403), means
// its tenant without it, and reads several tenants at once only if it
// may federate. Tokens are compared in constant time and never logged.
// With no token configured, everything is open (the standalone default).
package auth

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/tenant"
)

// Token is the cluster's shared secret, and the tenants' tokens
// (WithTenants). Its String never reveals them.
type Token struct {
	secret  string
	tenants []tenantToken
}

// Binding is what a tenant's token may name.
type Binding struct {
	// Tenants are the tenants the token may name (sorted).
	Tenants []string
	// Federate allows reads of several of Tenants at once ("a|b").
	Federate bool
}

type tenantToken struct {
	secret string
	Binding
}

// String redacts the token, so that logging a config never leaks it.
func (t Token) String() string {
	if t.secret == "" {
		return "none"
	}
	return "[redacted]"
}

// Enabled reports whether a token is set.
func (t Token) Enabled() bool { return t.secret != "" }

// Load reads the token: from the file at path if path is set (surrounding
// whitespace trimmed), else from the STRATA_AUTH_TOKEN variable, else none.
func Load(path string) (Token, error) {
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Token{}, fmt.Errorf("auth token file: %w", err)
		}
		s := strings.TrimSpace(string(data))
		if s == "" {
			return Token{}, fmt.Errorf("auth token file %s is empty", path)
		}
		return Token{secret: s}, nil
	}
	return Token{secret: strings.TrimSpace(os.Getenv("STRATA_AUTH_TOKEN"))}, nil
}

// Secret is the token itself, for a transport that carries it (the
// datanodes' peerwire hello); never log it.
func (t Token) Secret() string { return t.secret }

// New makes a token from a secret (tests).
func New(secret string) Token { return Token{secret: secret} }

// Match reports whether got is the cluster's token, in constant time.
func (t Token) Match(got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(t.secret)) == 1
}

// bound is the binding of the tenant's token got, if it is one. Every
// token is compared, in constant time.
func (t Token) bound(got string) (Binding, bool) {
	var b Binding
	found := false
	for _, tt := range t.tenants {
		if subtle.ConstantTimeCompare([]byte(got), []byte(tt.secret)) == 1 {
			b, found = tt.Binding, true
		}
	}
	return b, found
}

// who is what presented credentials authenticate: the cluster (ok and
// no binding), a tenant's token (bound), or nothing (!ok).
func (t Token) who(creds []string) (b Binding, bound, ok bool) {
	for _, c := range creds {
		if t.Match(c) {
			return Binding{}, false, true
		}
	}
	for _, c := range creds {
		if b, found := t.bound(c); found {
			return b, true, true
		}
	}
	return Binding{}, false, false
}

// ErrForbidden: a tenant's token named a tenant it may not.
var ErrForbidden = errors.New("forbidden")

// tenants checks a tenant's token's header (or metadata) value h, and
// returns the value the request goes on with: its one tenant if h is
// empty. The error's status is 400 (a bad header) or 403.
func (b Binding) tenants(h string) (string, int, error) {
	if strings.TrimSpace(h) == "" {
		if len(b.Tenants) != 1 {
			return "", http.StatusBadRequest, fmt.Errorf("%w: the token is bound to %d tenants: name one in %s", tenant.ErrInvalid, len(b.Tenants), tenant.Header)
		}
		return b.Tenants[0], 0, nil
	}
	ts, err := tenant.Parse(h)
	if err != nil {
		return "", http.StatusBadRequest, err
	}
	for _, t := range ts {
		if _, ok := slices.BinarySearch(b.Tenants, t); !ok {
			return "", http.StatusForbidden, fmt.Errorf("%w: the token may not name tenant %s", ErrForbidden, t)
		}
	}
	if len(ts) > 1 && !b.Federate {
		return "", http.StatusForbidden, fmt.Errorf("%w: the token may not read several tenants at once (%s): it is not allowed to federate", ErrForbidden, h)
	}
	return h, 0, nil
}

type boundKey struct{}

// BoundTenants reports whether ctx is a request a tenant's token
// authenticated, and the tenants it may name.
func BoundTenants(ctx context.Context) ([]string, bool) {
	b, ok := ctx.Value(boundKey{}).(Binding)
	return b.Tenants, ok
}

// WithTenants adds the tenants' tokens of a tokens file (LoadTenants) to
// the cluster's token, which they need: datanodes talk with it.
func (t Token) WithTenants(path string) (Token, error) {
	if path == "" {
		return t, nil
	}
	if !t.Enabled() {
		return Token{}, errors.New("a tenants' tokens file needs the cluster's auth token (--auth-token-file or STRATA_AUTH_TOKEN) too")
	}
	bs, err := LoadTenants(path)
	if err != nil {
		return Token{}, err
	}
	for secret, b := range bs {
		if t.Match(secret) {
			return Token{}, fmt.Errorf("auth tokens file %s: a tenant's token is the cluster's token", path)
		}
		t.tenants = append(t.tenants, tenantToken{secret, b})
	}
	return t, nil
}

// NewTenant adds a tenant's token (tests).
func (t Token) NewTenant(secret string, b Binding) Token {
	slices.Sort(b.Tenants)
	t.tenants = append(slices.Clone(t.tenants), tenantToken{secret, b})
	return t
}

// LoadTenants reads a tokens file: one token a line,
//
//	TOKEN TENANT[,TENANT...] [federate]
//
// blank lines and lines starting with # left out. A token bound to
// several tenants names one in each request (or, with federate, reads
// several at once).
func LoadTenants(path string) (map[string]Binding, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth tokens file: %w", err)
	}
	out := map[string]Binding{}
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		bad := func(why string, args ...any) error {
			return fmt.Errorf("auth tokens file %s, line %d: %s", path, i+1, fmt.Sprintf(why, args...))
		}
		if len(f) < 2 || len(f) > 3 {
			return nil, bad("want TOKEN TENANT[,TENANT...] [federate], got %d fields", len(f))
		}
		var b Binding
		for _, t := range strings.Split(f[1], ",") {
			if err := tenant.Check(t); err != nil {
				return nil, bad("%v", err)
			}
			b.Tenants = append(b.Tenants, t)
		}
		slices.Sort(b.Tenants)
		b.Tenants = slices.Compact(b.Tenants)
		if len(f) == 3 {
			if f[2] != "federate" {
				return nil, bad("the third field is %q: the only one is federate", f[2])
			}
			b.Federate = true
		}
		if _, dup := out[f[0]]; dup {
			return nil, bad("the token is on an earlier line too")
		}
		out[f[0]] = b
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("auth tokens file %s holds no token", path)
	}
	return out, nil
}

// ErrUnauthenticated: the request had no valid token.
var ErrUnauthenticated = errors.New("missing or invalid auth token")

// checkMD authenticates a call: the context it goes on with is a tenant's
// token's (BoundTenants), with its tenant in the metadata if it named
// none. A tenant's token calls the datanodes' service only.
func (t Token) checkMD(ctx context.Context, method string) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var creds []string
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok {
			creds = append(creds, tok)
		}
	}
	b, bound, ok := t.who(creds)
	switch {
	case !ok:
		return nil, status.Error(codes.Unauthenticated, ErrUnauthenticated.Error())
	case !bound:
		return ctx, nil
	case !strings.HasPrefix(method, "/strata.v1.Datanode/"):
		return nil, status.Errorf(codes.PermissionDenied, "%v: a tenant's token calls the datanodes' table and data API only, not %s", ErrForbidden, method)
	}
	vs := md.Get(tenant.MetadataKey)
	if len(vs) > 1 {
		return nil, status.Errorf(codes.InvalidArgument, "%v: %d %s values; give one", tenant.ErrInvalid, len(vs), tenant.MetadataKey)
	}
	h := ""
	if len(vs) == 1 {
		h = vs[0]
	}
	h, code, err := b.tenants(h)
	if err != nil {
		c := codes.PermissionDenied
		if code == http.StatusBadRequest {
			c = codes.InvalidArgument
		}
		return nil, status.Error(c, err.Error())
	}
	md = md.Copy()
	md.Set(tenant.MetadataKey, h)
	return context.WithValue(metadata.NewIncomingContext(ctx, md), boundKey{}, b), nil
}

func exempt(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

// ServerOptions are the interceptors that enforce the token (none when it
// is not set).
func (t Token) ServerOptions() []grpc.ServerOption {
	if !t.Enabled() {
		return nil
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if !exempt(info.FullMethod) {
				var err error
				if ctx, err = t.checkMD(ctx, info.FullMethod); err != nil {
					return nil, err
				}
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if !exempt(info.FullMethod) {
				ctx, err := t.checkMD(ss.Context(), info.FullMethod)
				if err != nil {
					return err
				}
				if ctx != ss.Context() {
					ss = ctxStream{ss, ctx}
				}
			}
			return h(srv, ss)
		}),
	}
}

// ctxStream is a stream with the context a tenant's token's check made.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

type bearer struct{ secret string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.secret}, nil
}

// RequireTransportSecurity is false: the token protects against
// unauthenticated callers on a private network; on an untrusted one,
// terminate TLS in front of Strata.
func (bearer) RequireTransportSecurity() bool { return false }

var _ credentials.PerRPCCredentials = bearer{}

// DialOptions send the token with every call (none when it is not set).
func (t Token) DialOptions() []grpc.DialOption {
	if !t.Enabled() {
		return nil
	}
	return []grpc.DialOption{grpc.WithPerRPCCredentials(bearer{t.secret})}
}

// Authorize adds the token to an outgoing HTTP request (nothing when it is
// not set).
func (t Token) Authorize(r *http.Request) {
	if t.Enabled() {
		r.Header.Set("Authorization", "Token "+t.secret)
	}
}

// HTTP wraps h so that every request but /health and /ping carries the
// token as InfluxDB clients send it: "Authorization: Token T" (v2),
// "Authorization: Bearer T", HTTP basic auth with password T, or the v1
// query parameter p=T.
func (t Token) HTTP(h http.Handler) http.Handler {
	if !t.Enabled() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || r.URL.Path == "/ping" {
			h.ServeHTTP(w, r)
			return
		}
		b, bound, ok := t.who(httpCreds(r))
		if ok && !bound {
			h.ServeHTTP(w, r)
			return
		}
		if ok {
			v, code, err := b.tenants(r.Header.Get(tenant.Header))
			if err == nil && operatorPath(r.URL.Path) {
				code, err = http.StatusForbidden, fmt.Errorf("%w: %s is the operator's (the cluster's token), not a tenant's: it shows or changes every tenant's", ErrForbidden, r.URL.Path)
			}
			if err != nil {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(code)
				c := "forbidden"
				if code == http.StatusBadRequest {
					c = "invalid"
				}
				_, _ = fmt.Fprintf(w, `{"code":%q,"message":%q,"status":"error","errorType":"bad_data","error":%q}`, c, err.Error(), err.Error())
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), boundKey{}, b))
			r.Header = r.Header.Clone()
			r.Header.Set(tenant.Header, v)
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.Header.Get("Accept"), "text/html") {
			// A browser loading the web UI (internal/ui): Basic makes it
			// ask for the token (as the password) and send it with the
			// page's API calls.
			w.Header().Set("WWW-Authenticate", `Basic realm="strata", charset="UTF-8"`)
		} else {
			w.Header().Set("WWW-Authenticate", `Token realm="strata"`)
		}
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = fmt.Fprintf(w, `{"code":"unauthorized","message":%q}`, ErrUnauthenticated.Error())
	})
}

// operatorPath: a path whose answer is the node's, of every tenant (its
// metrics name each tenant's series and refusals; profiles; a reload of
// the rule files), so the cluster's token only.
func operatorPath(p string) bool {
	return p == "/metrics" || p == "/-/reload" || strings.HasPrefix(p, "/debug/")
}

// httpCreds are the tokens a request presents.
func httpCreds(r *http.Request) []string {
	var out []string
	a := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(a, "Token "); ok {
		out = append(out, tok)
	}
	if tok, ok := strings.CutPrefix(a, "Bearer "); ok {
		out = append(out, tok)
	}
	if enc, ok := strings.CutPrefix(a, "Basic "); ok {
		if raw, err := base64.StdEncoding.DecodeString(enc); err == nil {
			if _, pass, ok := strings.Cut(string(raw), ":"); ok {
				out = append(out, pass)
			}
		}
	}
	if p := r.URL.Query().Get("p"); p != "" {
		out = append(out, p)
	}
	return out
}
