// Package auth is Strata's shared-token authentication: every gRPC call
// (except health checks) and every HTTP request (except /health and /ping)
// must carry the cluster's token. The token is compared in constant time
// and never logged. With no token configured, everything is open (the
// standalone default).
package auth

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Token is a shared secret. Its String never reveals it.
type Token struct{ secret string }

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
		return Token{s}, nil
	}
	return Token{strings.TrimSpace(os.Getenv("STRATA_AUTH_TOKEN"))}, nil
}

// Secret is the token itself, for a transport that carries it (the
// datanodes' peerwire hello); never log it.
func (t Token) Secret() string { return t.secret }

// New makes a token from a secret (tests).
func New(secret string) Token { return Token{secret} }

// Match reports whether got is the token, in constant time.
func (t Token) Match(got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(t.secret)) == 1
}

// ErrUnauthenticated: the request had no valid token.
var ErrUnauthenticated = errors.New("missing or invalid auth token")

func (t Token) checkMD(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok && t.Match(tok) {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, ErrUnauthenticated.Error())
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
				if err := t.checkMD(ctx); err != nil {
					return nil, err
				}
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if !exempt(info.FullMethod) {
				if err := t.checkMD(ss.Context()); err != nil {
					return err
				}
			}
			return h(srv, ss)
		}),
	}
}

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
	return []grpc.DialOption{grpc.WithPerRPCCredentials(bearer(t))}
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
		if r.URL.Path == "/health" || r.URL.Path == "/ping" || t.httpOK(r) {
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

func (t Token) httpOK(r *http.Request) bool {
	a := r.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(a, "Token "); ok && t.Match(tok) {
		return true
	}
	if tok, ok := strings.CutPrefix(a, "Bearer "); ok && t.Match(tok) {
		return true
	}
	if enc, ok := strings.CutPrefix(a, "Basic "); ok {
		if raw, err := base64.StdEncoding.DecodeString(enc); err == nil {
			if _, pass, ok := strings.Cut(string(raw), ":"); ok && t.Match(pass) {
				return true
			}
		}
	}
	if p := r.URL.Query().Get("p"); p != "" && t.Match(p) {
		return true
	}
	return false
}
