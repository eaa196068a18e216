package grpcapi

import (
	"google.golang.org/grpc"

	"github.com/stratadb/strata/internal/datanode"
	"github.com/stratadb/strata/internal/layout"
	"github.com/stratadb/strata/internal/wire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// tagsBytes is about how many bytes of values a RegionTags message holds
// (a client takes messages of up to 4 MiB by default; a tag may have a
// million values).
const tagsBytes = 1 << 20

// RegionTags answers a tag's values, or the tag names, of the series of a
// region hosted here (another datanode's label look-up), in messages of
// about tagsBytes (none if there is no value).
func (s *Server) RegionTags(req *pb.RegionTagsRequest, stream grpc.ServerStreamingServer[pb.RegionTagsResponse]) error {
	if err := regionCall(stream.Context()); err != nil {
		return err
	}
	id, err := layout.ParseRegionID(req.GetRegion())
	if err != nil {
		return Status(err)
	}
	q := datanode.TagQuery{Name: req.GetTag(), Names: req.GetNames(), Start: req.GetStart(), End: req.GetEnd(), Tags: wire.ToTags(req.GetTags()), In: wire.ToTagIns(req.GetIn())}
	vals, err := s.eng.RegionTags(stream.Context(), req.GetTable(), id, q)
	if err != nil {
		return Status(err)
	}
	for len(vals) > 0 {
		n, size := 0, 0
		for n < len(vals) && size < tagsBytes {
			size += len(vals[n]) + 3 // a field's tag and length, mostly
			n++
		}
		// The region's kept answer, only read to be marshalled.
		if err := stream.Send(&pb.RegionTagsResponse{Values: vals[:n]}); err != nil {
			return err
		}
		vals = vals[n:]
	}
	return nil
}
