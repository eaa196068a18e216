// Command strata is Strata's CLI and its single-process server
// (`strata standalone`).
//
// Exit codes: 0 success; 1 the operation failed (server error, I/O);
// 2 bad usage or input; 3 the table (or other object) does not exist or
// already exists; 4 the server could not be reached.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/procflags"
)

// Exit codes.
const (
	exitOK = iota
	exitFailure
	exitUsage
	exitNotFound
	exitUnavailable
)

// usageError marks bad usage or input.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "strata:", err)
	return exitCode(err)
}

func exitCode(err error) int {
	var ue usageError
	var pe procflags.UsageError
	if errors.As(err, &ue) || errors.As(err, &pe) {
		return exitUsage
	}
	var fe fsckExit
	if errors.As(err, &fe) {
		return fe.code
	}
	if s, ok := status.FromError(unwrapStatus(err)); ok {
		switch s.Code() {
		case codes.InvalidArgument, codes.ResourceExhausted:
			return exitUsage
		case codes.NotFound, codes.AlreadyExists:
			return exitNotFound
		case codes.Unavailable, codes.DeadlineExceeded:
			return exitUnavailable
		}
	}
	return exitFailure
}

func unwrapStatus(err error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if _, ok := status.FromError(e); ok && status.Code(e) != codes.Unknown {
			return e
		}
	}
	return err
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "strata",
		Short: "Strata: an object-store-native time-series storage service",
		Long: `Strata keeps every durable byte in an object store (a local directory by
default, or S3/MinIO): a write-ahead log, Parquet SSTs and a region manifest.

Start a server with "strata standalone", then write with any InfluxDB line
protocol client (or "strata write") and read with "strata query".

Settings come from flags, then STRATA_* environment variables (the flag name
in upper case with - as _, e.g. STRATA_DATA_DIR), then the --config file
(YAML, keys are flag names).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().String("config", "", "YAML config file (keys are flag names)")
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error { return procflags.Apply(cmd) }
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newStandalone(), newTable(), newWrite(), newQuery(), newAdmin(), newBench(), newFsck(), newCluster(), newRules(), newLimits(), newStore(), newHealth(), newTLS(), newCardinality())
	procflags.AddVersion(root)
	tlsFlags(root)
	return root
}
