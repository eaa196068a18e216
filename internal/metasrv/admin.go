package metasrv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/errclass"
	"github.com/stratadb/strata/internal/gcsched"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/tenant"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// datanodes returns a client of every live datanode.
func (s *Server) datanodes(ctx context.Context) (map[string]pb.DatanodeClient, *state, error) {
	st, err := s.read(ctx)
	if err != nil {
		return nil, nil, status.Error(codes.Unavailable, err.Error())
	}
	clients := map[string]pb.DatanodeClient{}
	for id, n := range st.nodes {
		if c, err := s.conn(n.GRPCAddr); err == nil {
			clients[id] = pb.NewDatanodeClient(c)
		}
	}
	return clients, st, nil
}

// fanOut calls f on every live datanode at once and collects the errors.
func fanOut(clients map[string]pb.DatanodeClient, f func(id string, c pb.DatanodeClient) error) error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for id, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(id, c); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("datanode %s: %w", id, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ListRegions reports each region's placement and its owner's statistics:
// every region's, or those of the call's tenant's table.
func (s *Server) ListRegions(ctx context.Context, req *pb.ListRegionsRequest) (*pb.ListRegionsResponse, error) {
	table := req.GetTable()
	if table != "" {
		var err error
		if table, err = qualify(ctx, table); err != nil {
			return nil, err
		}
	}
	return s.listRegions(ctx, table)
}

// listRegions is ListRegions of catalog table table ("": every table).
func (s *Server) listRegions(ctx context.Context, table string) (*pb.ListRegionsResponse, error) {
	cs, err := s.ClusterStatus(ctx, &pb.ClusterStatusRequest{})
	if err != nil {
		return nil, err
	}
	clients, _, err := s.datanodes(ctx)
	if err != nil {
		return nil, err
	}
	stats := map[string]*pb.RegionStat{}
	var mu sync.Mutex
	tables := map[string]bool{}
	for _, r := range cs.Regions {
		if table == "" || r.Table == table {
			tables[r.Table] = true
		}
	}
	fanErr := fanOut(clients, func(_ string, c pb.DatanodeClient) error {
		for t := range tables {
			// The datanode qualifies the name with the call's tenant.
			cctx, base := tenant.Call(ctx, t)
			resp, err := c.RegionStats(cctx, &pb.RegionStatsRequest{Table: base})
			if err != nil {
				return err
			}
			mu.Lock()
			for _, rs := range resp.Regions {
				stats[layout.RegionID{Table: rs.TableId, Region: rs.Region}.String()] = rs
			}
			mu.Unlock()
		}
		return nil
	})
	out := &pb.ListRegionsResponse{}
	for _, r := range cs.Regions {
		if !tables[r.Table] {
			continue
		}
		d := &pb.RegionDetail{Placement: r, Stats: stats[r.Region]}
		if d.Stats == nil {
			d.Error = "the owner did not report the region (not open yet, or unreachable)"
			if fanErr != nil {
				d.Error += ": " + fanErr.Error()
			}
		}
		out.Regions = append(out.Regions, d)
	}
	return out, nil
}

// Compact compacts a table's regions on their owners.
func (s *Server) Compact(ctx context.Context, req *pb.CompactRequest) (*pb.CompactResponse, error) {
	clients, _, err := s.datanodes(ctx)
	if err != nil {
		return nil, err
	}
	out := &pb.CompactResponse{}
	var mu sync.Mutex
	ctx = passTenant(ctx)
	err = fanOut(clients, func(_ string, c pb.DatanodeClient) error {
		resp, err := c.Compact(ctx, req)
		if err != nil {
			return err
		}
		mu.Lock()
		out.Jobs = append(out.Jobs, resp.Jobs...)
		mu.Unlock()
		return nil
	})
	if err != nil && len(out.Jobs) == 0 {
		return nil, grpcStatus(err)
	}
	return out, nil
}

// CancelCompaction cancels a table's compactions on every owner.
func (s *Server) CancelCompaction(ctx context.Context, req *pb.CancelCompactionRequest) (*pb.CancelCompactionResponse, error) {
	clients, _, err := s.datanodes(ctx)
	if err != nil {
		return nil, err
	}
	out := &pb.CancelCompactionResponse{}
	var mu sync.Mutex
	ctx = passTenant(ctx)
	err = fanOut(clients, func(_ string, c pb.DatanodeClient) error {
		resp, err := c.CancelCompaction(ctx, req)
		if err != nil {
			return err
		}
		mu.Lock()
		out.Cancelled += resp.Cancelled
		out.TooLate += resp.TooLate
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, grpcStatus(err)
	}
	return out, nil
}

// grpcStatus keeps a datanode's status code when there is one.
func grpcStatus(err error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if st, ok := status.FromError(e); ok && st.Code() != codes.Unknown {
			return status.Error(st.Code(), err.Error())
		}
	}
	if st, ok := status.FromError(err); ok {
		return st.Err()
	}
	return wire.Status(err)
}

// passTenant is ctx with the incoming call's tenant (tenant.MetadataKey)
// named to the datanodes it calls about the call's table.
func passTenant(ctx context.Context) context.Context {
	t, err := tenant.Incoming(ctx)
	if err != nil {
		return ctx // the datanode answers the bad name
	}
	return tenant.Outgoing(ctx, t)
}

// qualify is the catalog name of a call's table name (tenant.Incoming).
func qualify(ctx context.Context, name string) (string, error) {
	t, err := tenant.Incoming(ctx)
	if err != nil {
		return "", err
	}
	return tenant.Qualify(t, name), nil
}

// tableStatus is wire.Status(err) as the call's tenant names its tables.
func tableStatus(ctx context.Context, err error) error {
	t, terr := tenant.Incoming(ctx)
	if terr != nil || t == tenant.Default {
		return wire.Status(err)
	}
	return status.Error(errclass.Of(err).Code(), tenant.Unqualify(t, err.Error()))
}

// tableMsg is t as its tenant names it.
func tableMsg(t catalog.Table) *pb.Table {
	m := wire.TableMsg(t)
	m.Name = tenant.Base(t.Name)
	return m
}

// GcRun runs GC now on the owners of the selected regions.
func (s *Server) GcRun(ctx context.Context, req *pb.GcRegionRequest) (*pb.GcRegionResponse, error) {
	if req.GetTable() != "" && req.GetRegion() != "" {
		return nil, status.Error(codes.InvalidArgument, "give a table or a region, not both")
	}
	var only *layout.RegionID
	if req.GetRegion() != "" {
		id, err := layout.ParseRegionID(req.GetRegion())
		if err != nil {
			return nil, wire.Status(err)
		}
		only = &id
	}
	clients, st, err := s.datanodes(ctx)
	if err != nil {
		return nil, err
	}
	out := &pb.GcRegionResponse{}
	var mu sync.Mutex
	ctx = passTenant(ctx) // the datanodes qualify the table with it
	err = fanOut(clients, func(node string, c pb.DatanodeClient) error {
		r := &pb.GcRegionRequest{Table: req.GetTable(), Full: req.GetFull(), DryRun: req.GetDryRun(),
			LingeringSeconds: req.GetLingeringSeconds(), MinAgeSeconds: req.GetMinAgeSeconds()}
		if only != nil {
			if st.regions[*only].as.Owner != node {
				return nil
			}
			r.Region = only.String()
		}
		resp, err := c.GcRegion(ctx, r)
		if status.Code(err) == codes.NotFound && req.GetTable() != "" {
			return nil // this datanode hosts none of the table's regions yet
		}
		if err != nil {
			return err
		}
		mu.Lock()
		out.Regions = append(out.Regions, resp.Regions...)
		mu.Unlock()
		return nil
	})
	slices.SortFunc(out.Regions, func(a, b *pb.GcRegionResult) int { return strings.Compare(a.Region, b.Region) })
	if err != nil && len(out.Regions) == 0 {
		return nil, grpcStatus(err)
	}
	return out, nil
}

// GcStatus reports the scheduler's per-region state.
func (s *Server) GcStatus(ctx context.Context, _ *pb.GcStatusRequest) (*pb.GcStatusResponse, error) {
	states, err := gcsched.States(ctx, s.opts.Client)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	unix := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.Unix()
	}
	out := &pb.GcStatusResponse{}
	for id, st := range states {
		out.Regions = append(out.Regions, &pb.GcRegionState{Region: id.String(), LastFastUnix: unix(st.LastFast), LastFullUnix: unix(st.LastFull),
			NextFastUnix: unix(st.NextFast), NextFullUnix: unix(st.NextFull), LastResult: st.LastResult, LastError: st.LastError,
			Runs: st.Runs, Failures: st.Failures, Deleted: st.Deleted, Orphans: st.Orphans})
		if t, ok := s.cat.ByID(id.Table); ok {
			out.Regions[len(out.Regions)-1].Tenant = tenant.Of(t.Name)
		}
	}
	slices.SortFunc(out.Regions, func(a, b *pb.GcRegionState) int { return strings.Compare(a.Region, b.Region) })
	return out, nil
}

func optionsMsg(o gcsched.Options) *pb.GcOptions {
	return &pb.GcOptions{Enabled: o.Enabled, FastIntervalSeconds: int64(o.FastInterval / time.Second), FullIntervalSeconds: int64(o.FullInterval / time.Second),
		LingeringSeconds: int64(o.Lingering / time.Second), MinAgeSeconds: int64(o.MinAge / time.Second), Concurrency: int32(o.Concurrency),
		RunTimeoutSeconds: int64(o.RunTimeout / time.Second)}
}

// GetGcOptions returns the scheduler's options.
func (s *Server) GetGcOptions(ctx context.Context, _ *pb.GetGcOptionsRequest) (*pb.GcOptions, error) {
	o, err := gcsched.LoadOptions(ctx, s.opts.Client)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return optionsMsg(o), nil
}

// SetGcOptions replaces the scheduler's options.
func (s *Server) SetGcOptions(ctx context.Context, req *pb.GcOptions) (*pb.GcOptions, error) {
	secs := func(n int64) time.Duration { return time.Duration(n) * time.Second }
	o := gcsched.Options{Enabled: req.GetEnabled(), FastInterval: secs(req.GetFastIntervalSeconds()), FullInterval: secs(req.GetFullIntervalSeconds()),
		Lingering: secs(req.GetLingeringSeconds()), MinAge: secs(req.GetMinAgeSeconds()), Concurrency: int(req.GetConcurrency()), RunTimeout: secs(req.GetRunTimeoutSeconds())}
	if err := gcsched.SaveOptions(ctx, s.opts.Client, o); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	s.log.Info("gc options changed", "options", fmt.Sprintf("%+v", o))
	return optionsMsg(o), nil
}
