package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/fsck"
	"github.com/stratadb/strata/internal/gc"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/tenant"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

func newGC() *cobra.Command {
	cmd := &cobra.Command{Use: "gc", Short: "Garbage collection"}
	cmd.AddCommand(newGCRun(func(cmd *cobra.Command, req *pb.GcRegionRequest) (*pb.GcRegionResponse, error) {
		var resp *pb.GcRegionResponse
		err := withClient(cmd, func(ctx context.Context, c pb.DatanodeClient) error {
			var err error
			resp, err = c.GcRegion(ctx, req)
			return err
		})
		return resp, err
	}))
	return cmd
}

// newGCRun is `gc run`, over call (a datanode, or metasrv for a cluster).
func newGCRun(call func(*cobra.Command, *pb.GcRegionRequest) (*pb.GcRegionResponse, error)) *cobra.Command {
	run := &cobra.Command{
		Use:   "run",
		Short: "Run fast (default) or full-listing GC on regions now",
		Long: `Run GC on every region of the server, a table's regions (--table) or one region
(--region table_id/region).

Fast GC reads only the manifest and issues no LIST: it deletes removed files
past the lingering time (default 1h) that no scan reads, the outputs of
pending markers whose job is not running, and flushed WAL segments.

Full-listing GC (--full) lists the region and deletes objects no manifest
entry owns that are older than the minimum age (default 24h). Strata's
protocols leave no such objects, so it should find nothing; what it finds
is printed. --dry-run reports exactly what a run would delete.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			table, _ := f.GetString("table")
			reg, _ := f.GetString("region")
			if table != "" && reg != "" {
				return usagef("give --table or --region, not both")
			}
			full, _ := f.GetBool("full")
			dry, _ := f.GetBool("dry-run")
			lingering, _ := f.GetDuration("lingering")
			minAge, _ := f.GetDuration("min-age")
			if f.Changed("lingering") && full || f.Changed("min-age") && !full {
				return usagef("--lingering applies to fast GC, --min-age to full-listing GC (--full)")
			}
			secs := func(d time.Duration, set bool) int64 {
				if set && d == 0 {
					return -1 // an explicit 0 means no wait
				}
				return int64(d / time.Second)
			}
			{
				resp, err := call(cmd, &pb.GcRegionRequest{Table: table, Region: reg, Full: full, DryRun: dry,
					LingeringSeconds: secs(lingering, f.Changed("lingering")), MinAgeSeconds: secs(minAge, f.Changed("min-age"))})
				if err != nil {
					return fmt.Errorf("gc: %w", err)
				}
				format, _ := f.GetString("output")
				if format == "json" {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(resp.Regions)
				}
				var rows [][]string
				failed := 0
				n := func(v int64) string { return strconv.FormatInt(v, 10) }
				for _, r := range resp.Regions {
					if r.Error != "" {
						failed++
					}
					if full {
						rows = append(rows, []string{r.Region, n(r.Listed), n(int64(len(r.Orphans))), n(r.Deleted), n(r.Young), n(r.Bytes), n(r.ListRequests), n(r.DeleteRequests), r.Error})
					} else {
						rows = append(rows, []string{r.Region, n(r.RemovedFiles), n(r.PendingJobs), n(r.PendingFiles), n(r.WalSegments), n(r.Bytes), n(r.DeleteRequests), r.Error})
					}
				}
				header := []string{"region", "removed_files", "pending_jobs", "pending_files", "wal_segments", "bytes", "deletes", "error"}
				if full {
					header = []string{"region", "listed", "orphans", "deleted", "young", "bytes", "lists", "deletes", "error"}
				}
				if err := output(cmd.OutOrStdout(), format, header, rows); err != nil {
					return err
				}
				for _, line := range gcByTenant(resp.Regions, full) {
					fmt.Fprintln(cmd.OutOrStdout(), line)
				}
				if full {
					for _, r := range resp.Regions {
						for _, o := range r.Orphans {
							fmt.Fprintf(cmd.OutOrStdout(), "orphan %s (%s, %d bytes, age %s)\n", o.Key, o.Kind, o.Size, time.Duration(o.AgeSeconds)*time.Second)
						}
					}
				}
				if dry {
					fmt.Fprintln(cmd.OutOrStdout(), "dry run: nothing was deleted")
				}
				if failed > 0 {
					return fmt.Errorf("gc failed on %d of %d regions (safe to run again)", failed, len(resp.Regions))
				}
				return nil
			}
		},
	}
	run.Flags().Bool("full", false, "full-listing GC instead of fast GC")
	run.Flags().Bool("dry-run", false, "report what would be deleted; delete nothing")
	run.Flags().String("table", "", "only this table's regions")
	run.Flags().String("region", "", "only this region (table_id/region)")
	run.Flags().Duration("lingering", 0, "fast GC: age a removed file must reach (default 1h; 0 for none)")
	run.Flags().Duration("min-age", 0, "full GC: age an unowned object must reach (default 24h; 0 for none)")
	outputFlag(run)
	return run
}

// gcByTenant sums a run's regions up by their tables' tenant
// (docs/tenants.md): one line a tenant, in order.
func gcByTenant(regions []*pb.GcRegionResult, full bool) []string {
	type sums struct{ regions, files, orphans, deleted, bytes, failed int64 }
	by := map[string]*sums{}
	for _, r := range regions {
		t := cmp.Or(r.Tenant, "(unknown table)")
		s := by[t]
		if s == nil {
			s = &sums{}
			by[t] = s
		}
		s.regions++
		s.files += r.RemovedFiles + r.WalSegments
		s.orphans += int64(len(r.Orphans))
		s.deleted += r.Deleted
		s.bytes += r.Bytes
		if r.Error != "" {
			s.failed++
		}
	}
	var out []string
	for _, t := range slices.Sorted(maps.Keys(by)) {
		s := by[t]
		if full {
			out = append(out, fmt.Sprintf("tenant %s: %d regions, %d orphans, %d deleted, %d bytes, %d failed", t, s.regions, s.orphans, s.deleted, s.bytes, s.failed))
		} else {
			out = append(out, fmt.Sprintf("tenant %s: %d regions, %d removed files and WAL segments, %d bytes, %d failed", t, s.regions, s.files, s.bytes, s.failed))
		}
	}
	return out
}

// fsckExit carries fsck's exit code: 2 when live data is missing, 1 when
// unowned objects were found (unless allowed).
type fsckExit struct {
	code int
	msg  string
}

func (e fsckExit) Error() string { return e.msg }

func newFsck() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fsck",
		Short: "Check a store offline: missing live files, unowned objects, manifests",
		Long: `Check the ownership invariant of a store without a server: for each region,
live files missing from the store (data loss), objects nothing owns, pending
markers, removed files awaiting GC, and manifest gaps or corruption. It only
reads and lists.

Exit codes: 0 clean; 1 unowned objects found (unless --allow-orphans);
2 live files missing or a manifest unreadable (or bad usage).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			url, _ := f.GetString("store")
			if url == "" {
				return usagef("--store is required (e.g. file:///var/lib/strata/store or s3://bucket?endpoint=...)")
			}
			table, _ := f.GetString("table")
			tn, _ := f.GetString("tenant")
			if tn != "" {
				if err := tenant.Check(tn); err != nil {
					return usagef("--tenant: %v", err)
				}
			}
			allow, _ := f.GetBool("allow-orphans")
			format, _ := f.GetString("output")
			if format != "table" && format != "json" {
				return usagef("unknown output format %q (want table or json)", format)
			}
			ctx := cmd.Context()
			store, err := objstore.Open(ctx, url, objstore.Options{})
			if err != nil {
				return usagef("open store %s: %v", url, err)
			}
			defer store.Close()
			opts := fsck.Options{Table: table, Tenant: tn}
			if eps, _ := f.GetStringSlice("etcd"); len(eps) > 0 {
				// A cluster's catalog is in etcd: the tables' names and
				// tenants are read there.
				cli, err := cluster.Connect(eps)
				if err != nil {
					return usagef("--etcd: %v", err)
				}
				defer cli.Close()
				cat, err := catalog.Open(ctx, catalog.NewEtcdBackend(cli), 1)
				if err != nil {
					return fmt.Errorf("fsck: the catalog in etcd: %w", err)
				}
				opts.Tables = append(cat.List(false), cat.List(true)...)
				cat.Close()
			}
			rep, err := fsck.Check(ctx, store, opts)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if format == "json" {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				var rows [][]string
				n := strconv.Itoa
				for _, g := range rep.Regions {
					status := "ok"
					switch {
					case g.ManifestError != "" || len(g.Missing) > 0:
						status = "DATA LOSS"
					case len(g.Orphans) > 0:
						status = "orphans"
					}
					rows = append(rows, []string{g.ID, g.Table, strconv.FormatUint(g.Version, 10), n(g.LiveFiles), n(len(g.Missing)), n(len(g.Orphans)),
						n(len(g.Pending)), n(g.RemovedAwaitingGC), n(g.WALAwaitingGC), status})
				}
				if err := output(w, "table", []string{"region", "table", "manifest", "live", "missing", "orphans", "pending", "removed", "wal_gc", "status"}, rows); err != nil {
					return err
				}
				for _, g := range rep.Regions {
					if g.ManifestError != "" {
						fmt.Fprintf(w, "region %s: manifest: %s\n", g.ID, g.ManifestError)
					}
					for _, id := range g.Missing {
						fmt.Fprintf(w, "region %s: live file %s is missing\n", g.ID, id)
					}
					for _, o := range g.Orphans {
						fmt.Fprintf(w, "region %s: unowned %s %s (%d bytes, age %s)\n", g.ID, o.Kind, o.Key, o.Size, o.Age.Round(time.Second))
					}
					for _, p := range g.Pending {
						fmt.Fprintf(w, "region %s: pending job %s: %d files, epoch %d, age %s\n", g.ID, p.Job, p.Files, p.Epoch, p.Age.Round(time.Second))
					}
				}
				for _, o := range rep.Orphans {
					where := "outside any known region"
					if o.Kind == gc.KindStream {
						where = "a WAL stream segment no region covers"
					}
					fmt.Fprintf(w, "unowned %s (%d bytes, age %s): %s\n", o.Key, o.Size, o.Age.Round(time.Second), where)
				}
				if st := rep.Streams; st.Listed > 0 {
					fmt.Fprintf(w, "WAL streams: %d segments: %d live, %d awaiting GC, %d fences\n", st.Listed, st.Live, st.AwaitingGC, st.Fences)
				}
				for _, t := range slices.Sorted(maps.Keys(rep.Tenants)) {
					c := rep.Tenants[t]
					fmt.Fprintf(w, "tenant %s: %d regions, %d objects listed, %d live files (%d bytes), %d missing, %d unowned\n", t, c.Regions, c.Listed, c.LiveFiles, c.LiveBytes, c.Missing, c.Orphans)
				}
				fmt.Fprintf(w, "%d regions, %d objects listed, %d missing, %d unowned\n", len(rep.Regions), rep.Listed, rep.Missing(), rep.OrphanCount())
			}
			switch {
			case rep.Missing() > 0:
				return fsckExit{2, fmt.Sprintf("fsck: %d live files missing or manifests unreadable", rep.Missing())}
			case rep.OrphanCount() > 0 && !allow:
				return fsckExit{1, fmt.Sprintf("fsck: %d unowned objects (full-listing GC deletes them once old enough; --allow-orphans to accept)", rep.OrphanCount())}
			}
			return nil
		},
	}
	cmd.Flags().String("store", "", "object store URL (file://..., s3://bucket?endpoint=...)")
	cmd.Flags().String("table", "", "only this table (name or id)")
	cmd.Flags().String("tenant", "", "the tenant of --table (default: the default tenant)")
	cmd.Flags().StringSlice("etcd", nil, "a cluster's etcd endpoints, to read its catalog from (default: the catalog the store keeps)")
	cmd.Flags().Bool("allow-orphans", false, "exit 0 even if unowned objects are found")
	cmd.Flags().StringP("output", "o", "table", "output format: table or json")
	return cmd
}
