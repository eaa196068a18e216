package tenant

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Incoming is the one tenant a gRPC call names in its metadata
// (MetadataKey): Default without it. A bad name, or several, is
// InvalidArgument.
func Incoming(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(MetadataKey)
	if len(v) > 1 {
		return "", status.Errorf(codes.InvalidArgument, "%v: %d %s values; give one", ErrInvalid, len(v), MetadataKey)
	}
	h := ""
	if len(v) == 1 {
		h = v[0]
	}
	t, err := One(h)
	if err != nil {
		return "", status.Error(codes.InvalidArgument, err.Error())
	}
	return t, nil
}

// Outgoing is ctx with tenant t named in the metadata of the calls made
// with it (nothing for the default tenant: a call that names none is
// its).
func Outgoing(ctx context.Context, t string) context.Context {
	if t == Default || t == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, MetadataKey, t)
}

// Call is the context and name of a call about catalog table name made
// to a server that qualifies its requests' table names (a datanode's
// table API): the tenant in the metadata, its own name in the request.
func Call(ctx context.Context, name string) (context.Context, string) {
	t, base := Split(name)
	return Outgoing(ctx, t), base
}
