// Package procflags gives every Strata binary (strata, metasrv, datanode)
// one configuration rule: flags, then STRATA_<FLAG> environment variables
// (upper case, - as _), then the YAML file named by --config (or
// STRATA_CONFIG), whose keys are flag names.
package procflags

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/stratadb/strata/internal/tlsutil"
	"github.com/stratadb/strata/internal/version"
)

// UsageError is bad usage: a bad flag value, environment variable or
// config file. Binaries exit with code 2 on it.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error { return UsageError{fmt.Errorf(format, args...)} }

// Apply fills cmd's flags not set on the command line from STRATA_<FLAG>,
// and failing that from the YAML file named by --config (or
// STRATA_CONFIG). Keys of the file that are not flags of cmd are reported
// on its stderr and ignored. Use it as a PersistentPreRunE.
func Apply(cmd *cobra.Command) error {
	var file map[string]any
	path, _ := cmd.Flags().GetString("config")
	if path == "" {
		path = os.Getenv("STRATA_CONFIG")
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return usagef("config file: %v", err)
		}
		if err := yaml.Unmarshal(data, &file); err != nil {
			return usagef("config file %s: %v", path, err)
		}
	}
	known := map[string]bool{}
	var ferr error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		known[f.Name] = true
		if f.Changed || ferr != nil || f.Name == "config" || f.Name == "help" {
			return
		}
		env := "STRATA_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if err := cmd.Flags().Set(f.Name, v); err != nil {
				ferr = usagef("%s=%q: %v", env, v, err)
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			if err := setFromYAML(cmd.Flags(), f.Name, v); err != nil {
				ferr = usagef("config file %s: %s: %v", path, f.Name, err)
			}
		}
	})
	if ferr != nil {
		return ferr
	}
	for k := range file {
		if !known[k] && cmd.Root().PersistentFlags().Lookup(k) == nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: config file %s: %q is not a flag of %q; ignored\n", cmd.Root().Name(), path, k, cmd.CommandPath())
		}
	}
	return nil
}

func setFromYAML(fs *pflag.FlagSet, name string, v any) error {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if err := fs.Set(name, fmt.Sprint(e)); err != nil {
				return err
			}
		}
		return nil
	default:
		return fs.Set(name, fmt.Sprint(x))
	}
}

// Command builds a process's root command: use, its doc, a --config flag,
// the configuration rule (Apply) and quiet errors; run gets the parsed
// flags. Exit with Exit(cmd.Execute()).
func Command(use, short, long string, run func(cmd *cobra.Command) error) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.NoArgs, SilenceUsage: true, SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return Apply(cmd) },
		RunE:              func(cmd *cobra.Command, _ []string) error { return run(cmd) }}
	c.PersistentFlags().String("config", "", "YAML config file (keys are flag names)")
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return UsageError{err} })
	AddVersion(c)
	return c
}

// AddVersion gives a root command --version and a version subcommand,
// both printing "NAME VERSION (revision …, go…, os/arch)".
func AddVersion(root *cobra.Command) {
	root.Version = version.Get().String()
	root.SetVersionTemplate(root.Name() + " {{.Version}}\n")
	root.AddCommand(&cobra.Command{Use: "version", Short: "Print the build: version, revision, Go version", Args: cobra.NoArgs,
		// The version needs no configuration, so a bad config file does
		// not hide it.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", root.Name(), version.Get())
		}})
}

// Exit reports err of a process's root command on stderr and returns the
// exit code: 0, 2 for bad usage, 1 otherwise.
func Exit(name string, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	var ue UsageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// Logger builds the process logger from a level name.
func Logger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// Split splits a comma-separated list, dropping empty items.
func Split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// TLSFlags adds a server process's TLS flags, filling c.
func TLSFlags(fs *pflag.FlagSet, c *tlsutil.Config) {
	fs.StringVar(&c.CertFile, "tls-cert-file", "", "PEM certificate this process serves over TLS (gRPC and HTTP) and presents to others under mutual TLS; reloaded when the file changes")
	fs.StringVar(&c.KeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&c.CAFile, "tls-ca-file", "", "PEM CA that signs the other processes' certificates: turns on TLS for calls to them (and to an https:// etcd)")
	fs.StringVar(&c.ClientCAFile, "tls-client-ca-file", "", "mutual TLS: require every client to present a certificate this PEM CA signed")
}
