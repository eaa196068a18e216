package agent

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// RegionTags answers q of region id on its owner, through RegionTags
// (see ownerStream: the owner followed while the region moves, an error
// naming the region if it moves once part of the answer came), or here if
// this node turns out to own it. An owner older than RegionTags
// (Unimplemented: a rolling upgrade) has the series q selects listed
// instead (Scan, series only), and the answer collected from their keys.
func (a *Agent) RegionTags(ctx context.Context, table string, id layout.RegionID, q datanode.TagQuery) ([]string, error) {
	preq := &pb.RegionTagsRequest{Table: table, Region: id.String(), Tag: q.Name, Names: q.Names, Start: q.Start, End: q.End,
		Tags: wire.FromTags(q.Tags), In: wire.FromTagIns(q.In)}
	var out []string
	s := newOwnerStream(a, ctx, id, func() (err error) {
		out, err = a.eng.RegionTags(ctx, table, id, q)
		return err
	}, func(ctx context.Context, c pb.DatanodeClient, _ string) (recver[pb.RegionTagsResponse], error) {
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
		// whole: from the first one on, a call that breaks fails (the
		// next owner's answer would come from its start again).
		s.delivered.Store(true)
		out = append(out, m.Values...)
	}
}

// listTags answers q of region id from a listing of the series it
// selects on the region's owner (a series-only Scan, which every version
// answers).
func (a *Agent) listTags(ctx context.Context, table string, id layout.RegionID, q datanode.TagQuery) ([]string, error) {
	if q.End <= q.Start {
		return nil, nil // (a Scan takes 0, 0 for all time)
	}
	it, err := a.Scan(ctx, table, id, q.Listing())
	if err != nil {
		return nil, err
	}
	c := q.Collector()
	for it.Next() {
		if err := c.Add(it.Entry().Series); err != nil {
			it.Close()
			return nil, err
		}
	}
	if err := errors.Join(it.Err(), it.Close()); err != nil {
		return nil, err
	}
	return c.Answer(), nil
}
