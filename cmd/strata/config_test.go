package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
)

// Flags beat STRATA_* variables, which beat the config file.
func TestConfigPrecedence(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "strata.yaml")
	if err := os.WriteFile(cfg, []byte("data-dir: /from/file\nhttp-addr: file:1\ngrpc-addr: file:2\nunknown-key: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	probe := func() *cobra.Command {
		c := &cobra.Command{Use: "probe", RunE: func(cmd *cobra.Command, args []string) error {
			got = map[string]string{}
			for _, n := range []string{"data-dir", "http-addr", "grpc-addr"} {
				got[n], _ = cmd.Flags().GetString(n)
			}
			return nil
		}}
		c.Flags().String("data-dir", "default", "")
		c.Flags().String("http-addr", "default", "")
		c.Flags().String("grpc-addr", "default", "")
		return c
	}
	var stderr bytes.Buffer
	root := newRoot(nil, &bytes.Buffer{}, &stderr)
	root.AddCommand(probe())
	t.Setenv("STRATA_HTTP_ADDR", "env:1")
	t.Setenv("STRATA_GRPC_ADDR", "env:2")
	root.SetArgs([]string{"probe", "--config", cfg, "--grpc-addr", "flag:2"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"data-dir": "/from/file", "http-addr": "env:1", "grpc-addr": "flag:2"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if !bytes.Contains(stderr.Bytes(), []byte("unknown-key")) {
		t.Errorf("unknown config key not reported: %s", stderr.String())
	}
	// A bad value in the environment is a usage error.
	t.Setenv("STRATA_DATA_DIR", "x")
	t.Setenv("STRATA_TIMEOUT", "soon")
	if code := run([]string{"table", "list"}, nil, &bytes.Buffer{}, &bytes.Buffer{}); code != exitUsage {
		t.Errorf("bad STRATA_TIMEOUT: exit %d", code)
	}
	if code := run([]string{"nosuchcommand"}, nil, &bytes.Buffer{}, &bytes.Buffer{}); code == exitOK {
		t.Error("unknown command exited 0")
	}
}
