package grpcapi

import (
	"context"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/stratadb/strata/internal/peerwire"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// PeerHandlers are the calls other datanodes make over peerwire, served
// by the same handlers as over gRPC.
func (s *Server) PeerHandlers() map[byte]peerwire.Handler {
	return map[byte]peerwire.Handler{
		peerwire.ScanColumns: func(ctx context.Context, req []byte, send func(proto.Message) error) error {
			var r pb.ScanRequest
			if err := proto.Unmarshal(req, &r); err != nil {
				return status.Errorf(codes.InvalidArgument, "ScanColumns: a request that does not decode: %v", err)
			}
			return s.ScanColumns(&r, peerStream[pb.ScanColumnsResponse]{ctx: ctx, send: send})
		},
		peerwire.ForwardWrite: func(ctx context.Context, req []byte, send func(proto.Message) error) error {
			var r pb.ForwardWriteRequest
			if err := unmarshalForward(req, &r); err != nil {
				return status.Errorf(codes.InvalidArgument, "ForwardWrite: a request that does not decode: %v", err)
			}
			resp, err := s.ForwardWrite(ctx, &r)
			if err != nil {
				return err
			}
			return send(resp)
		},
	}
}

// peerStream is a peerwire call's answer as a handler's gRPC stream. The
// handlers use Send and Context; peerwire carries no metadata, and a
// handler that sets some gets an error, not a panic.
type peerStream[T any] struct {
	ctx  context.Context
	send func(proto.Message) error
}

var errNoMetadata = status.Error(codes.Unimplemented, "peerwire carries no gRPC metadata")

func (p peerStream[T]) Context() context.Context     { return p.ctx }
func (p peerStream[T]) Send(m *T) error              { return p.send(any(m).(proto.Message)) }
func (p peerStream[T]) SendMsg(m any) error          { return p.send(m.(proto.Message)) }
func (p peerStream[T]) RecvMsg(any) error            { return errNoMetadata }
func (p peerStream[T]) SetHeader(metadata.MD) error  { return errNoMetadata }
func (p peerStream[T]) SendHeader(metadata.MD) error { return errNoMetadata }
func (p peerStream[T]) SetTrailer(metadata.MD)       {}

// unmarshalForward decodes a ForwardWriteRequest as proto.Unmarshal does
// (unknown fields aside, which it skips), but its batch aliases req: the
// call's frame, which peerwire keeps until the handler returns, and which
// ForwardWrite reads the batch from (decompressing it, or decoding it;
// the region copies what it keeps). proto.Unmarshal copied every batch,
// 80 KB of a TSBS request's share, into fresh memory.
func unmarshalForward(req []byte, r *pb.ForwardWriteRequest) error {
	for len(req) > 0 {
		num, typ, n := protowire.ConsumeTag(req)
		if n < 0 {
			return protowire.ParseError(n)
		}
		req = req[n:]
		switch {
		case (num == 1 || num == 2 || num == 5) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(req)
			if n < 0 {
				return protowire.ParseError(n)
			}
			req = req[n:]
			switch num {
			case 1, 2:
				if !utf8.Valid(v) {
					return fmt.Errorf("field %d: a string that is not UTF-8", num)
				}
				if num == 1 {
					r.Table = string(v)
				} else {
					r.Region = string(v)
				}
			case 5:
				r.Batch = v
			}
		case (num == 3 || num == 4) && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(req)
			if n < 0 {
				return protowire.ParseError(n)
			}
			req = req[n:]
			if num == 3 {
				r.Compression = uint32(v)
			} else {
				r.Size = v
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, req)
			if n < 0 {
				return protowire.ParseError(n)
			}
			req = req[n:]
		}
	}
	return nil
}
