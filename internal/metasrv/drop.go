package metasrv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/catalog"
	"github.com/stratadb/strata/internal/cluster"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/manifest"
	"github.com/stratadb/strata/internal/objstore"
	"github.com/stratadb/strata/internal/walstream"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// drops finishes the drops of tables marked dropping, on the leader, until
// the term ends: a drop a previous leader started is finished here.
func (s *Server) drops(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		tables, err := s.cat.Dropping(ctx)
		if err == nil {
			for _, tb := range tables {
				if err := s.finishDrop(ctx, tb); err != nil && ctx.Err() == nil {
					s.log.Warn("dropping a table failed; retrying", "table", tb.Name, "err", err)
				}
			}
		}
		if sweeps, err := s.cat.Sweeps(ctx); err == nil {
			for id, at := range sweeps {
				if time.Since(at) < s.finalSweepAfter() {
					continue
				}
				if err := s.finalSweep(ctx, id); err != nil && ctx.Err() == nil {
					s.log.Warn("final sweep of a dropped table failed; retrying", "table_id", id, "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// finishDrop: the table is out of the table list, so placement has removed
// (or removes) its regions' assignments. Every live datanode closes what
// it still hosts of it and says so; a datanode whose lease expired has
// closed its regions by the lease rule. Only then are the objects deleted,
// so no owner can write one after the deletion; then the catalog forgets
// the table.
func (s *Server) finishDrop(ctx context.Context, t catalog.Table) error {
	if s.opts.Store == nil {
		return errors.New("metasrv has no --store: it cannot delete the table's objects")
	}
	if err := s.place(ctx); err != nil {
		return err
	}
	st, err := s.read(ctx)
	if err != nil {
		return err
	}
	for id := range st.regions {
		if id.Table == t.ID {
			return fmt.Errorf("region %s is still assigned", id)
		}
	}
	clients, _, err := s.datanodes(ctx)
	if err != nil {
		return err
	}
	// A live datanode that does not answer (frozen, cut off) is asked
	// again next round; its lease ends the wait at the latest.
	if err := fanOut(clients, func(_ string, c pb.DatanodeClient) error {
		cctx, cancel := context.WithTimeout(ctx, closeTableTimeout)
		defer cancel()
		_, err := c.CloseTable(cctx, &pb.CloseTableRequest{TableId: t.ID})
		return err
	}); err != nil {
		return err
	}
	if err := s.releaseStreams(ctx, t); err != nil {
		return err
	}
	sweptAt := time.Now()
	n, err := s.sweep(ctx, t.ID)
	if err != nil {
		return err
	}
	// GC state of the table's regions goes too.
	// Best effort: a key left behind schedules nothing (the scheduler
	// runs the regions of tables that exist).
	for i := range t.Regions {
		_, _ = s.opts.Client.Delete(ctx, cluster.GCStateKey(layout.RegionID{Table: t.ID, Region: i}))
	}
	if err := s.cat.Forget(ctx, t.Name, sweptAt); err != nil {
		return err
	}
	s.log.Info("table dropped", "table", t.Name, "id", t.ID, "objects", n, "final_sweep_in", s.finalSweepAfter())
	return nil
}

// closeTableTimeout bounds a datanode's answer to CloseTable (it waits for
// compactions to acknowledge their cancellation).
const closeTableTimeout = time.Minute

// finalSweepAfter is how long after a drop's sweep a former owner may
// still land an object under the table's prefix: a datanode that was
// paused with its lease expired can land a WAL or manifest write only
// before its lease's deadline (region.leaseBucket), which is before the
// sweep, and an upload only within the upload window of its reservation.
func (s *Server) finalSweepAfter() time.Duration {
	if s.opts.FinalSweepAfter > 0 {
		return s.opts.FinalSweepAfter
	}
	return manifest.UploadWindow + manifest.MaxClockSkew
}

// finalSweep deletes what landed under a dropped table's prefix after its
// first sweep, then forgets the table for good.
func (s *Server) finalSweep(ctx context.Context, id uint32) error {
	if err := s.deleteDropFences(ctx, id); err != nil {
		return err
	}
	n, err := s.sweep(ctx, id)
	if err != nil {
		return err
	}
	if n > 0 {
		s.log.Warn("final sweep of a dropped table deleted late writes of a former owner", "table_id", id, "objects", n)
	}
	return s.cat.SweepDone(ctx, id)
}

// releaseStreams lets go of what the table's regions hold in the nodes'
// shared WAL streams, before their manifests go: the segments they
// reference or released, wherever no region of another table needs them
// (walstream.Collect, with the table's regions counted as gone). The
// stream fences they recorded are left for the final sweep, once no
// former writer can land under them; their keys wait in etcd.
//
// It reads segments only by their envelope (walstream), so the
// coordinator links no data plane. Every step is idempotent, so a drop
// that a failover interrupts runs it again: a stream sealed before is
// found sealed at the same number, and a segment deleted before is
// missing.
func (s *Server) releaseStreams(ctx context.Context, t catalog.Table) error {
	store := s.opts.Store
	peers := walstream.Peers{State: func(ctx context.Context, id layout.RegionID) (*manifest.State, error) {
		if id.Table == t.ID {
			return nil, nil
		}
		return manifest.ReadState(ctx, store, id)
	}}
	var fences []string
	for i := range t.Regions {
		id := layout.RegionID{Table: t.ID, Region: i}
		st, err := manifest.ReadState(ctx, store, id)
		if err != nil {
			return fmt.Errorf("region %s: %w", id, err)
		}
		if st == nil {
			continue
		}
		ranges := slices.Clone(st.StreamGarbage)
		for _, ref := range st.Streams {
			end := ref.End
			if end == 0 {
				// A stream its writer may still write: seal it, as a new
				// owner would (its writer rolls over), so every segment
				// of the range may go, the newest included.
				var err error
				end, _, err = walstream.Replay(ctx, store, ref.Stream, ref.From, false, id, math.MaxUint64, nil)
				if err != nil {
					return fmt.Errorf("region %s: seal stream %s: %w", id, ref.Stream, err)
				}
				fences = append(fences, layout.StreamKey(ref.Stream, end))
			}
			if end > ref.From {
				ranges = append(ranges, manifest.StreamRef{Stream: ref.Stream, From: ref.From, End: end})
			}
		}
		if _, err := walstream.Collect(ctx, store, id, ranges, peers, false); err != nil {
			return fmt.Errorf("region %s: %w", id, err)
		}
		for _, f := range st.StreamFences {
			fences = append(fences, layout.StreamKey(f.Stream, f.End))
		}
	}
	if len(fences) == 0 {
		return nil
	}
	data, err := json.Marshal(fences)
	if err != nil {
		return err
	}
	_, err = s.opts.Client.Put(ctx, cluster.DropFencesKey(t.ID), string(data))
	return err
}

// deleteDropFences deletes a dropped table's stream fences (final sweep).
func (s *Server) deleteDropFences(ctx context.Context, id uint32) error {
	resp, err := s.opts.Client.Get(ctx, cluster.DropFencesKey(id))
	if err != nil {
		return err
	}
	for _, kv := range resp.Kvs {
		var keys []string
		if err := json.Unmarshal(kv.Value, &keys); err != nil {
			return fmt.Errorf("drop fences of table %d: %w", id, err)
		}
		for _, k := range keys {
			if err := s.opts.Store.Delete(ctx, k); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return err
			}
		}
	}
	_, err = s.opts.Client.Delete(ctx, cluster.DropFencesKey(id))
	return err
}

// sweep deletes every object under a table's prefix and says how many.
func (s *Server) sweep(ctx context.Context, id uint32) (int, error) {
	return objstore.DeletePrefix(ctx, s.opts.Store, layout.TablePrefix(id))
}

// DropTable marks the table dropping and waits until the leader finished.
func (s *Server) DropTable(ctx context.Context, req *pb.DropTableRequest) (*pb.DropTableResponse, error) {
	if s.opts.Store == nil {
		return nil, status.Error(codes.FailedPrecondition, "metasrv was started without --store: it cannot delete a table's objects")
	}
	name, err := qualify(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if _, err := s.cat.MarkDropping(ctx, name); err != nil {
		return nil, tableStatus(ctx, err)
	}
	for {
		tables, err := s.cat.Dropping(ctx)
		if err != nil {
			return nil, tableStatus(ctx, err)
		}
		still := false
		for _, t := range tables {
			still = still || t.Name == name
		}
		if !still {
			return &pb.DropTableResponse{}, nil
		}
		select {
		case <-ctx.Done():
			return nil, status.Error(codes.DeadlineExceeded, "the drop continues in the background: "+ctx.Err().Error())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// DescribeTable returns a table and its regions' statistics.
func (s *Server) DescribeTable(ctx context.Context, req *pb.DescribeTableRequest) (*pb.DescribeTableResponse, error) {
	name, err := qualify(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	t, err := s.cat.Table(ctx, name)
	if err != nil {
		return nil, tableStatus(ctx, err)
	}
	regs, err := s.listRegions(ctx, t.Name)
	if err != nil {
		return nil, err
	}
	out := &pb.DescribeTableResponse{Table: tableMsg(t)}
	for _, r := range regs.Regions {
		if r.Stats != nil {
			out.Regions = append(out.Regions, r.Stats)
		}
	}
	return out, nil
}
