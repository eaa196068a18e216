package tenant

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestIncoming(t *testing.T) {
	in := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	for _, c := range []struct {
		ctx  context.Context
		want string
		code codes.Code
	}{
		{context.Background(), Default, codes.OK},
		{in(MetadataKey, "a"), "a", codes.OK},
		{in(MetadataKey, ""), Default, codes.OK},
		{in(MetadataKey, "a|b"), "", codes.InvalidArgument},
		{in(MetadataKey, "a/b"), "", codes.InvalidArgument},
		{in(MetadataKey, "a", MetadataKey, "b"), "", codes.InvalidArgument},
	} {
		got, err := Incoming(c.ctx)
		if got != c.want || status.Code(err) != c.code {
			t.Errorf("%v: %q, %v; want %q, %v", c.ctx, got, err, c.want, c.code)
		}
	}
	// Outgoing and Call name the tenant as Incoming reads it.
	ctx, base := Call(context.Background(), Qualify("a", "cpu"))
	md, _ := metadata.FromOutgoingContext(ctx)
	if base != "cpu" || len(md.Get(MetadataKey)) != 1 || md.Get(MetadataKey)[0] != "a" {
		t.Errorf("Call: %q, %v", base, md)
	}
	ctx, base = Call(context.Background(), "cpu")
	if md, ok := metadata.FromOutgoingContext(ctx); base != "cpu" || ok && len(md.Get(MetadataKey)) > 0 {
		t.Errorf("Call of the default tenant's: %q, %v", base, md)
	}
}
