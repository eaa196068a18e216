package main

import (
	"context"
	"crypto/tls"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/tenant"
	"github.com/stratadb/strata/internal/tlsutil"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// clientFlags adds the flags every client command has.
func clientFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().String("server", "localhost:8087", "the datanode's gRPC address")
	cmd.PersistentFlags().String("auth-token-file", "", "file holding the auth token to send (default: $STRATA_AUTH_TOKEN)")
	cmd.PersistentFlags().Duration("timeout", 30*time.Second, "bound on the whole command (0: none)")
	tenantFlag(cmd.PersistentFlags())
}

// tenantFlag adds --tenant: the tenant whose tables a command names.
func tenantFlag(f *pflag.FlagSet) {
	f.String("tenant", "", "the tenant whose tables the command names (sent as X-Scope-OrgID; default: the default tenant; docs/tenants.md)")
}

// withTenant is ctx naming --tenant's tenant in its calls' metadata (one
// tenant: a call names one).
func withTenant(cmd *cobra.Command, ctx context.Context) (context.Context, error) {
	v, _ := cmd.Flags().GetString("tenant")
	t, err := tenant.One(v)
	if err != nil {
		return nil, usagef("--tenant: %v", err)
	}
	return tenant.Outgoing(ctx, t), nil
}

// setTenant names --tenant's tenants in an HTTP request (a read may name
// several: "a|b").
func setTenant(cmd *cobra.Command, req *http.Request) error {
	v, _ := cmd.Flags().GetString("tenant")
	if v == "" {
		return nil
	}
	if _, err := tenant.Parse(v); err != nil {
		return usagef("--tenant: %v", err)
	}
	req.Header.Set(tenant.Header, v)
	return nil
}

// dial connects to the server named by --server and returns a context
// bounded by --timeout.
func dial(cmd *cobra.Command) (pb.DatanodeClient, context.Context, func(), error) {
	addr, _ := cmd.Flags().GetString("server")
	timeout, _ := cmd.Flags().GetDuration("timeout")
	opts, err := clientAuth(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	tr, err := transport(cmd)
	if err != nil {
		return nil, nil, nil, err
	}
	conn, err := grpc.NewClient(addr, append(opts, tr,
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))...)
	if err != nil {
		return nil, nil, nil, usagef("--server %q: %v", addr, err)
	}
	ctx, err := withTenant(cmd, cmd.Context())
	if err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	cancel := context.CancelFunc(func() {})
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	}
	return pb.NewDatanodeClient(conn), ctx, func() { cancel(); conn.Close() }, nil
}

// clientAuth are the dial options that send the token, if any.
func clientAuth(cmd *cobra.Command) ([]grpc.DialOption, error) {
	path, _ := cmd.Flags().GetString("auth-token-file")
	tok, err := auth.Load(path)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return tok.DialOptions(), nil
}

// withClient runs f with a client of --server and a context bounded by
// --timeout.
func withClient(cmd *cobra.Command, f func(ctx context.Context, c pb.DatanodeClient) error) error {
	c, ctx, done, err := dial(cmd)
	if err != nil {
		return err
	}
	defer done()
	addr, _ := cmd.Flags().GetString("server")
	return hintTLS(cmd, addr, f(ctx, c))
}

// hintTLS explains a connection failure. A plaintext client is told that
// the server may speak TLS. A TLS client whose certificate the server
// refused often sees only a reset (under TLS 1.3 the server checks it
// after the client's handshake is done), so the handshake is tried again
// to read the server's reason.
func hintTLS(cmd *cobra.Command, addr string, err error) error {
	if err == nil || status.Code(err) != codes.Unavailable {
		return err
	}
	c := clientTLS(cmd)
	if !c.Client() {
		return fmt.Errorf("%w (if the server uses TLS, pass --tls-ca-file, and --tls-cert-file and --tls-key-file if it requires client certificates)", err)
	}
	if why := tlsRefusal(addr, c); why != nil {
		return fmt.Errorf("%w (TLS: %v)", err, why)
	}
	return err
}

// tlsRefusal handshakes with addr and reads briefly: a server that
// refuses the client's certificate says why in an alert.
func tlsRefusal(addr string, c tlsutil.Config) error {
	cfg, err := c.ClientTLS()
	if err != nil {
		return err
	}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil // accepted: the server waits for the client to speak
		}
		return err
	}
	return nil
}

// output renders rows as an aligned table, CSV or JSON (an array of
// objects keyed by header).
func output(w io.Writer, format string, header []string, rows [][]string) error {
	switch format {
	case "table", "":
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(header, "\t"))
		for _, r := range rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		return tw.Flush()
	case "csv":
		cw := csv.NewWriter(w)
		if err := cw.Write(header); err != nil {
			return err
		}
		return cw.WriteAll(rows) // flushes; the first error of any write
	case "json":
		out := make([]map[string]string, len(rows))
		for i, r := range rows {
			m := map[string]string{}
			for j, h := range header {
				if j < len(r) && r[j] != "" {
					m[h] = r[j]
				}
			}
			out[i] = m
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return usagef("unknown output format %q (want table, csv or json)", format)
}

func outputFlag(cmd *cobra.Command) {
	cmd.Flags().StringP("output", "o", "table", "output format: table, csv or json")
}

// tlsFlags adds the root's TLS flags: the CA that verifies servers, and the
// client certificate for mutual TLS (for standalone, the certificate it
// serves).
func tlsFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.String("tls-ca-file", "", "PEM CA that signs the servers' certificates: connect with TLS, verifying them")
	f.String("tls-cert-file", "", "PEM certificate: presented to servers that require mutual TLS (standalone: the certificate it serves)")
	f.String("tls-key-file", "", "PEM private key of --tls-cert-file")
}

// clientTLS is the TLS configuration of a client command.
func clientTLS(cmd *cobra.Command) tlsutil.Config {
	ca, _ := cmd.Flags().GetString("tls-ca-file")
	cert, _ := cmd.Flags().GetString("tls-cert-file")
	key, _ := cmd.Flags().GetString("tls-key-file")
	return tlsutil.Config{CAFile: ca, CertFile: cert, KeyFile: key}
}

// transport is the gRPC transport of a client command: TLS with
// --tls-ca-file (or a client certificate), else plaintext.
func transport(cmd *cobra.Command) (grpc.DialOption, error) {
	opt, err := clientTLS(cmd).DialOption()
	if err != nil {
		return nil, usagef("%v", err)
	}
	return opt, nil
}

// httpClient is the HTTP client of a client command and the scheme to
// use: https with the TLS flags.
func httpClient(cmd *cobra.Command, timeout time.Duration) (*http.Client, string, error) {
	c := clientTLS(cmd)
	if !c.Client() {
		return &http.Client{Timeout: timeout}, "http", nil
	}
	cfg, err := c.ClientTLS()
	if err != nil {
		return nil, "", usagef("%v", err)
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: cfg}}, "https", nil
}
