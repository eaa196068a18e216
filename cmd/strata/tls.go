package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stratadb/strata/internal/procflags"
	"github.com/stratadb/strata/internal/tlsutil"
)

func newTLS() *cobra.Command {
	cmd := &cobra.Command{Use: "tls", Short: "TLS certificates for a cluster"}
	gen := &cobra.Command{
		Use:   "generate",
		Short: "Write a new CA, a node certificate and a client certificate",
		Long: `Write a new certificate authority (ca.pem, ca-key.pem) into --dir, a node
certificate it signed for the given --hosts (node.pem, node-key.pem: served
by metasrv and the datanodes, and presented by them under mutual TLS), and
a client certificate for the CLI (client.pem, client-key.pem), each valid
for a year. Keep ca-key.pem out of the containers. docs/deploy.md shows the
compose cluster with these.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, _ := cmd.Flags().GetString("dir")
			list, _ := cmd.Flags().GetStringSlice("hosts")
			hosts := procflags.Split(strings.Join(list, ","))
			if len(hosts) == 0 {
				return usagef("--hosts is required: the names and addresses clients use to reach the servers")
			}
			f, err := tlsutil.Generate(dir, hosts)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s, %s and their keys (hosts %s)\n", f.CA, f.Node, f.Client, strings.Join(hosts, ", "))
			return nil
		},
	}
	gen.Flags().String("dir", "certs", "directory to write the PEM files into")
	gen.Flags().StringSlice("hosts", []string{"localhost", "127.0.0.1"}, "DNS names and IP addresses of the node certificate")
	cmd.AddCommand(gen)
	return cmd
}
