// Package grpcapi serves the datanode gRPC service (proto/strata/v1) over
// a datanode.Engine, and converts between its messages and Strata's types.
package grpcapi

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/auth"
	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/freelist"
	"github.com/stratadb/strata/internal/fwdbatch"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/region"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	"github.com/stratadb/strata/internal/tenant"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// Server implements pb.DatanodeServer.
type Server struct {
	pb.UnimplementedDatanodeServer
	eng   *datanode.Engine
	rules func() ([]byte, error)
}

// New returns the service.
func New(eng *datanode.Engine) *Server { return &Server{eng: eng} }

// WithRules makes RuleGroups answer groups (the state of the rule groups
// evaluated here, as JSON: rules.Manager.LocalRuleGroups); without it,
// RuleGroups answers none.
func (s *Server) WithRules(groups func() ([]byte, error)) *Server {
	s.rules = groups
	return s
}

// RuleGroups answers the state of the stored rule groups evaluated here.
func (s *Server) RuleGroups(ctx context.Context, req *pb.RuleGroupsRequest) (*pb.RuleGroupsResponse, error) {
	if err := regionCall(ctx); err != nil { // another node's, for /api/v1/rules
		return nil, err
	}
	if s.rules == nil {
		return &pb.RuleGroupsResponse{GroupsJson: []byte("[]")}, nil
	}
	data, err := s.rules()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "rule groups: %v", err)
	}
	return &pb.RuleGroupsResponse{GroupsJson: data}, nil
}

// Register adds the service to s.
func (s *Server) Register(g *grpc.Server) { pb.RegisterDatanodeServer(g, s) }

// Status maps an engine error to a gRPC status by its class
// (datanode.ErrClass): an error another datanode answered keeps its code.
func Status(err error) error {
	return datanode.ErrClass(err).Status(err)
}

// fail is Status(err) as the call's tenant names its tables: the catalog
// names of its own in the message are its names.
func fail(ctx context.Context, err error) error {
	t, terr := tenant.Incoming(ctx)
	if terr != nil || t == tenant.Default {
		return Status(err)
	}
	return status.Error(datanode.ErrClass(err).Code(), tenant.Unqualify(t, err.Error()))
}

// table is the catalog name of a call's table: name, of the tenant the
// call's metadata names (tenant.Incoming; docs/tenants.md). Every table
// name of a call but a region's (another datanode's, which names the
// catalog's) goes through it.
func table(ctx context.Context, name string) (string, error) {
	t, err := tenant.Incoming(ctx)
	if err != nil {
		return "", err
	}
	return tenant.Qualify(t, name), nil
}

// regionCall refuses a call addressed to a region (one datanode's to
// another, naming catalog tables), or another of the calls nodes make to
// each other, made with a tenant's token: it could reach another tenant's
// tables.
func regionCall(ctx context.Context) error {
	return operatorCall(ctx, "a tenant's token may not make the calls datanodes make to each other (regions, rule groups)")
}

// operatorCall refuses a call made with a tenant's token: the cluster's
// token only.
func operatorCall(ctx context.Context, why string) error {
	if _, bound := auth.BoundTenants(ctx); bound {
		return status.Error(codes.PermissionDenied, why)
	}
	return nil
}

// tableMsg is t as a call of its tenant names it.
func tableMsg(t catalog.Table) *pb.Table {
	m := wire.TableMsg(t)
	m.Name = tenant.Base(t.Name)
	return m
}

func (s *Server) Write(ctx context.Context, req *pb.WriteRequest) (*pb.WriteResponse, error) {
	var res region.WriteResult
	var err error
	if req.GetRegion() != "" {
		var id layout.RegionID
		if err = regionCall(ctx); err != nil {
			return nil, err
		}
		if id, err = layout.ParseRegionID(req.GetRegion()); err == nil {
			res, err = s.eng.WriteRegion(ctx, req.GetTable(), id, wire.ToPoints(req.GetPoints()))
		}
	} else {
		var name string
		if name, err = table(ctx, req.GetTable()); err != nil {
			return nil, err
		}
		res, err = s.eng.Write(ctx, name, wire.ToPoints(req.GetPoints()), datanode.WriteOptions{CreateTable: req.GetCreateTable()})
	}
	if err != nil {
		return nil, fail(ctx, err)
	}
	return &pb.WriteResponse{Written: int64(res.Written), Expired: int64(res.Expired)}, nil
}

// scratches are the memory of forwarded batches, kept for the next ones
// (freelist: a sync.Pool's were mostly gone by the next write).
var scratches = freelist.New[*fwdbatch.Scratch](8)

// ForwardWrite writes the share of a write another datanode forwarded:
// decoded (its structure and keys checked) and written to the region,
// which must be hosted here (datanode.Engine.WriteForwarded checks the
// rest).
func (s *Server) ForwardWrite(ctx context.Context, req *pb.ForwardWriteRequest) (*pb.WriteResponse, error) {
	if err := regionCall(ctx); err != nil {
		return nil, err
	}
	id, err := layout.ParseRegionID(req.GetRegion())
	if err != nil {
		return nil, fail(ctx, err)
	}
	sc, ok := scratches.Get()
	if !ok {
		sc = new(fwdbatch.Scratch)
	}
	defer func() { // the region copied what it keeps
		if sc.Keep() {
			scratches.Put(sc)
		}
	}()
	c := fwdbatch.Codec(req.GetCompression())
	raw, err := fwdbatch.Decompress(c, sc.Buf, req.GetBatch(), req.GetSize())
	if err != nil {
		return nil, fail(ctx, err)
	}
	if c != fwdbatch.None {
		sc.Buf = raw
	}
	b, err := sc.Decode(raw)
	if err != nil {
		return nil, fail(ctx, err)
	}
	if c == fwdbatch.Snappy {
		// An S2 block already: the region's WAL takes it as it came
		// (region.Batch.Encoded), valid until this call returns.
		b.Encoded = req.GetBatch()
	}
	res, err := s.eng.WriteForwarded(ctx, req.GetTable(), id, b)
	if err != nil {
		return nil, fail(ctx, err)
	}
	return &pb.WriteResponse{Written: int64(res.Written), Expired: int64(res.Expired)}, nil
}

func (s *Server) Delete(ctx context.Context, req *pb.DeleteRequest) (*pb.DeleteResponse, error) {
	name, err := table(ctx, req.GetTable())
	if err != nil {
		return nil, err
	}
	if err := s.eng.Delete(ctx, name, wire.ToTags(req.GetTags()), req.GetStart(), req.GetEnd()); err != nil {
		return nil, fail(ctx, err)
	}
	return &pb.DeleteResponse{}, nil
}

// scanRequest is the scan req asks for.
func scanRequest(req *pb.ScanRequest) scan.Request {
	start, end := req.GetStart(), req.GetEnd()
	if start == 0 && end == 0 {
		start, end = region.AllTime, region.AllTimeEnd
	}
	fields := req.GetFields()
	if len(fields) == 0 {
		fields = nil
	}
	return scan.Request{Start: start, End: end, Tags: wire.ToTags(req.GetTags()), In: wire.ToTagIns(req.GetIn()), Fields: fields, BatchRows: int(req.GetBatchRows()), SeriesOnly: req.GetSeriesOnly(),
		Rollup: wire.ToRollup(req.GetRollup()), Aggregate: wire.ToAggregate(req.GetAggregate())}
}

func (s *Server) Scan(req *pb.ScanRequest, stream grpc.ServerStreamingServer[pb.ScanResponse]) error {
	rreq := scanRequest(req)
	var sc *datanode.Scanner
	var err error
	if req.GetRegion() != "" {
		var id layout.RegionID
		if err = regionCall(stream.Context()); err != nil {
			return err
		}
		if id, err = layout.ParseRegionID(req.GetRegion()); err == nil {
			sc, err = s.eng.ScanRegion(stream.Context(), req.GetTable(), id, rreq)
		}
	} else {
		var name string
		if name, err = table(stream.Context(), req.GetTable()); err != nil {
			return err
		}
		sc, err = s.eng.Scan(stream.Context(), name, rreq)
	}
	if err != nil {
		return fail(stream.Context(), err)
	}
	defer sc.Close()
	first := &pb.ScanResponse{}
	for _, f := range sc.Fields() {
		first.Fields = append(first.Fields, &pb.FieldInfo{Name: f.Name, Type: f.Kind.String()})
	}
	sent := false
	var tags []row.Tag
	for sc.Next() {
		resp := &pb.ScanResponse{}
		if !sent {
			resp = first
		}
		batch := sc.Batch()
		resp.Rows = make([]*pb.Row, len(batch))
		rows := make([]pb.Row, len(batch))
		last := ""
		for i := range batch {
			e := &batch[i]
			if len(resp.Series) == 0 || e.Series != last {
				tags, err = row.DecodeSeries(tags[:0], e.Series)
				if err != nil {
					return fail(stream.Context(), err)
				}
				resp.Series = append(resp.Series, &pb.Series{Tags: wire.FromTags(tags)})
				last = e.Series
			}
			r := &rows[i]
			r.Series = uint32(len(resp.Series) - 1)
			r.Ts = e.TS
			r.Values = make([]*pb.Value, len(sc.Fields()))
			for j := range r.Values {
				r.Values[j] = wire.FromValue(e.Field(j))
			}
			resp.Rows[i] = r
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		sent = true
	}
	if err := sc.Err(); err != nil {
		return fail(stream.Context(), err)
	}
	if !sent {
		return stream.Send(first)
	}
	return nil
}

// Column scans are sent in responses of about columnsBytes, each column
// in pieces of at most columnPiece values (a client takes messages of up
// to 4 MiB by default).
const (
	columnsBytes = 1 << 20
	columnPiece  = 32 << 10
)

func (s *Server) ScanColumns(req *pb.ScanRequest, stream grpc.ServerStreamingServer[pb.ScanColumnsResponse]) error {
	if err := regionCall(stream.Context()); err != nil {
		return err
	}
	id, err := layout.ParseRegionID(req.GetRegion())
	if err != nil {
		return Status(err)
	}
	var mu sync.Mutex // the region calls emit from several goroutines
	resp := &pb.ScanColumnsResponse{}
	size := 0
	send := func() error {
		err := stream.Send(resp)
		resp, size = &pb.ScanColumnsResponse{Type: resp.Type, Rolled: resp.Rolled, Aggregated: resp.Aggregated}, 0
		return err
	}
	err = s.eng.ScanRegionColumns(stream.Context(), req.GetTable(), id, scanRequest(req), func(c *scan.Column) error {
		mu.Lock()
		defer mu.Unlock()
		resp.Type, resp.Rolled, resp.Aggregated = c.Kind.String(), c.Rolled, c.Aggregated
		for piece := *c; ; {
			n := min(len(piece.TS), columnPiece)
			m := wire.FromColumn(&scan.Column{SeriesColumn: scan.SeriesColumn{Series: piece.Series, TS: piece.TS[:n], Bits: piece.Bits[:n], Null: piece.Null[:min(n, len(piece.Null))], Finite: piece.Finite},
				Samples: piece.Samples, Ties: piece.Ties})
			resp.Columns = append(resp.Columns, m)
			size += len(m.Series) + len(m.Ts) + len(m.Values) + len(m.Nulls)
			if size >= columnsBytes {
				if err := send(); err != nil {
					return err
				}
			}
			if n == len(piece.TS) {
				return nil
			}
			piece.TS, piece.Bits, piece.Samples = piece.TS[n:], piece.Bits[n:], 0 // a rollup's samples are counted once
			if piece.Null != nil {
				piece.Null = piece.Null[n:]
			}
		}
	})
	if err != nil {
		return Status(err)
	}
	if len(resp.Columns) > 0 {
		return send()
	}
	return nil
}

func (s *Server) Compact(ctx context.Context, req *pb.CompactRequest) (*pb.CompactResponse, error) {
	name, err := table(ctx, req.GetTable())
	if err != nil {
		return nil, err
	}
	res, err := s.eng.Compact(ctx, name, req.GetAll())
	if err != nil {
		return nil, fail(ctx, err)
	}
	out := &pb.CompactResponse{}
	for _, r := range res {
		out.Jobs = append(out.Jobs, &pb.CompactionResult{Inputs: int64(len(r.Inputs)), Outputs: int64(len(r.Outputs)), BytesIn: r.BytesIn, BytesOut: r.BytesOut,
			RowsIn: r.RowsIn, RowsOut: r.RowsOut, DurationMs: r.Duration.Milliseconds()})
	}
	return out, nil
}

func (s *Server) CancelCompaction(ctx context.Context, req *pb.CancelCompactionRequest) (*pb.CancelCompactionResponse, error) {
	name, err := table(ctx, req.GetTable())
	if err != nil {
		return nil, err
	}
	c, late, err := s.eng.CancelCompaction(ctx, name)
	if err != nil {
		return nil, fail(ctx, err)
	}
	return &pb.CancelCompactionResponse{Cancelled: int64(c), TooLate: int64(late)}, nil
}

func (s *Server) TruncateTable(ctx context.Context, req *pb.TruncateTableRequest) (*pb.TruncateTableResponse, error) {
	name, err := table(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if err := s.eng.TruncateTable(ctx, name); err != nil {
		return nil, fail(ctx, err)
	}
	return &pb.TruncateTableResponse{}, nil
}

// GcRegion runs GC on the selected regions. A region whose run fails is
// reported in its result; the call fails only if no region could be
// selected. It is the operator's (the cluster's token): its ages and
// full listings are the store's safety and cost, not a tenant's to set.
// A table it names is the call's tenant's.
func (s *Server) GcRegion(ctx context.Context, req *pb.GcRegionRequest) (*pb.GcRegionResponse, error) {
	secs := func(n int64) time.Duration { return time.Duration(n) * time.Second }
	if err := operatorCall(ctx, "GC is the operator's call (the cluster's token): a tenant's token may not run it"); err != nil {
		return nil, err
	}
	name := req.GetTable()
	if name != "" {
		var err error
		if name, err = table(ctx, name); err != nil {
			return nil, err
		}
	}
	res, err := s.eng.GC(ctx, datanode.GCRequest{Table: name, Region: req.GetRegion(), Full: req.GetFull(), DryRun: req.GetDryRun(),
		Lingering: secs(req.GetLingeringSeconds()), MinAge: secs(req.GetMinAgeSeconds())})
	if err != nil && len(res) == 0 {
		return nil, fail(ctx, err)
	}
	out := &pb.GcRegionResponse{}
	for _, r := range res {
		m := &pb.GcRegionResult{Region: r.Region.String(), Mode: "fast", DryRun: r.DryRun}
		if t, ok := s.eng.TableByID(r.Region.Table); ok {
			m.Tenant = tenant.Of(t.Name)
		}
		if r.Full {
			l := r.Listed
			m.Mode = "full"
			m.Bytes, m.ListRequests, m.DeleteRequests = l.Bytes, int64(l.Lists), int64(l.Deletes)
			m.Listed, m.Deleted, m.Young, m.Failures = int64(l.Listed), int64(len(l.Deleted)), int64(l.Young), int64(l.Failures)
			for _, o := range l.Orphans {
				m.Orphans = append(m.Orphans, &pb.GcObject{Key: o.Key, Kind: string(o.Kind), Size: o.Size, AgeSeconds: int64(o.Age / time.Second)})
			}
		} else {
			f := r.Fast
			m.RemovedFiles, m.PendingJobs, m.PendingFiles, m.WalSegments = int64(len(f.RemovedFiles)), int64(len(f.PendingJobs)), int64(len(f.PendingFiles)), int64(f.WALSegments)
			m.Bytes, m.DeleteRequests, m.Failures = f.Bytes, int64(f.Requests), int64(f.Failures)
		}
		if r.Err != nil {
			m.Error = r.Err.Error()
		}
		out.Regions = append(out.Regions, m)
	}
	return out, nil
}

func (s *Server) Flush(ctx context.Context, req *pb.FlushRequest) (*pb.FlushResponse, error) {
	name := req.GetTable()
	if name != "" {
		var err error
		if name, err = table(ctx, name); err != nil {
			return nil, err
		}
	} else if err := regionCall(ctx); err != nil { // every tenant's tables
		return nil, err
	}
	if err := s.eng.Flush(ctx, name); err != nil {
		return nil, fail(ctx, err)
	}
	return &pb.FlushResponse{}, nil
}

func regionStats(st []datanode.RegionStats) []*pb.RegionStat {
	out := make([]*pb.RegionStat, len(st))
	for i, r := range st {
		out[i] = &pb.RegionStat{TableId: r.ID.Table, Region: r.ID.Region, Files: int64(r.Files), Rows: r.Rows, Bytes: r.Bytes,
			PendingJobs: int64(r.Pending), RemovedFiles: int64(r.Removed), FlushedSeq: r.FlushedSeq, ManifestVersion: r.ManifestVer,
			Epoch: r.Epoch, MinTs: r.MinTS, MaxTs: r.MaxTS, MemtableBytes: r.MemtableBytes}
	}
	return out
}

func (s *Server) RegionStats(ctx context.Context, req *pb.RegionStatsRequest) (*pb.RegionStatsResponse, error) {
	name, err := table(ctx, req.GetTable())
	if err != nil {
		return nil, err
	}
	st, err := s.eng.Stats(ctx, name)
	if err != nil {
		return nil, fail(ctx, err)
	}
	return &pb.RegionStatsResponse{Regions: regionStats(st)}, nil
}

func (s *Server) CreateTable(ctx context.Context, req *pb.CreateTableRequest) (*pb.CreateTableResponse, error) {
	if req.GetTtlSeconds() < 0 || req.GetCompactionWindowSeconds() < 0 {
		return nil, status.Error(codes.InvalidArgument, "negative TTL or compaction window")
	}
	name, err := table(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	t, err := s.eng.CreateTable(ctx, catalog.TableSpec{Name: name, Regions: req.GetRegions(), Timestamp: req.GetTimestampColumn(),
		TTL: time.Duration(req.GetTtlSeconds()) * time.Second, CompactionWindow: time.Duration(req.GetCompactionWindowSeconds()) * time.Second,
		Partition: req.GetPartitionBy()})
	if err != nil {
		return nil, fail(ctx, err)
	}
	return &pb.CreateTableResponse{Table: tableMsg(t)}, nil
}

func (s *Server) ListTables(ctx context.Context, req *pb.ListTablesRequest) (*pb.ListTablesResponse, error) {
	tn, err := tenant.Incoming(ctx)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListTablesResponse{}
	for _, t := range s.eng.TablesOf(tn) {
		resp.Tables = append(resp.Tables, tableMsg(t))
	}
	return resp, nil
}

func (s *Server) DescribeTable(ctx context.Context, req *pb.DescribeTableRequest) (*pb.DescribeTableResponse, error) {
	name, err := table(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	t, err := s.eng.Table(name)
	if err != nil {
		return nil, fail(ctx, err)
	}
	st, err := s.eng.Stats(ctx, name)
	if err != nil {
		return nil, fail(ctx, err)
	}
	return &pb.DescribeTableResponse{Table: tableMsg(t), Regions: regionStats(st)}, nil
}

// CloseTable closes the table's regions hosted here (a drop in progress).
func (s *Server) CloseTable(ctx context.Context, req *pb.CloseTableRequest) (*pb.CloseTableResponse, error) {
	if err := regionCall(ctx); err != nil { // metasrv's, by id
		return nil, err
	}
	n, err := s.eng.CloseTable(ctx, req.GetTableId())
	if err != nil {
		return nil, fail(ctx, err)
	}
	return &pb.CloseTableResponse{Closed: int64(n)}, nil
}

func (s *Server) DropTable(ctx context.Context, req *pb.DropTableRequest) (*pb.DropTableResponse, error) {
	name, err := table(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if err := s.eng.DropTable(ctx, name); err != nil {
		return nil, fail(ctx, err)
	}
	return &pb.DropTableResponse{}, nil
}
