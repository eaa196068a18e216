package agent

import (
	"context"
	"errors"
	"io"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/scan"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// RegionTags answers q from the postings of region id on its owner,
// through RegionTags (see ownerStream: the owner followed while the
// region moves, an error naming the region if it moves once part of the
// answer came), or here if this node turns out to own it. An owner older
// than RegionTags (Unimplemented: a rolling upgrade) has the region's
// series listed instead (Scan, series only), and the answer collected
// from their keys.
func (a *Agent) RegionTags(ctx context.Context, table string, id layout.RegionID, q datanode.TagQuery) ([]string, error) {
	if err := q.Check(); err != nil {
		return nil, err
	}
	preq := &pb.RegionTagsRequest{Table: table, Region: id.String(), Tag: q.Name, Names: q.Names, Start: q.Start, End: q.End}
	if q.Where != nil {
		preq.Where = &pb.Tag{Name: q.Where.Name, Value: q.Where.Value}
	}
	var out []string
	s := newOwnerStream(a, ctx, id, func() (err error) {
		out, err = a.eng.RegionTags(ctx, table, id, q)
		return err
	}, func(ctx context.Context, c pb.DatanodeClient) (grpc.ServerStreamingClient[pb.RegionTagsResponse], error) {
		return c.RegionTags(ctx, preq)
	})
	defer s.close()
	for {
		m, err := s.Recv()
		switch {
		case err == io.EOF, errors.Is(err, errHere):
			return out, nil
		case status.Code(err) == codes.Unimplemented:
			a.log.Debug("the owner lacks RegionTags (an older version): listing the region's series", "region", id.String(), "owner", s.addr)
			return a.listTags(ctx, table, id, q)
		case err != nil:
			return nil, err
		}
		// Messages come in order, and the answer is kept until it is
		// whole: from the first one on, a stream that breaks fails (the
		// next owner's answer would come from its start again).
		s.delivered.Store(true)
		out = append(out, m.Values...)
	}
}

// listTags answers q of region id from a listing of its series on its
// owner (a series-only Scan, which every version answers): what
// RegionTags answers from the postings.
func (a *Agent) listTags(ctx context.Context, table string, id layout.RegionID, q datanode.TagQuery) ([]string, error) {
	if q.End <= q.Start {
		return nil, nil // (a Scan takes 0, 0 for all time)
	}
	req := scan.Request{Start: q.Start, End: q.End, Fields: []string{}, SeriesOnly: true}
	if q.Where != nil {
		req.Tags = []row.Tag{*q.Where}
	}
	it, err := a.Scan(ctx, table, id, req)
	if err != nil {
		return nil, err
	}
	var out []string
	var tags []row.Tag
	last := ""
	for it.Next() {
		k := it.Entry().Series
		if k == last {
			continue
		}
		last = k
		if !q.Names {
			if v := row.SeriesTag(k, q.Name); v != "" {
				out = append(out, v)
			}
			continue
		}
		if tags, err = row.DecodeSeries(tags[:0], k); err != nil {
			it.Close()
			return nil, err
		}
		for _, t := range tags {
			out = append(out, t.Name)
		}
	}
	if err := errors.Join(it.Err(), it.Close()); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
