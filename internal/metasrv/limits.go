package metasrv

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/limits"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// Tenants' limits are etcd keys (package limits, docs/limits.md); any
// replica serves these calls, each one etcd read or compare-and-swap. The
// datanodes watch the keys.

// GetLimits answers a tenant's limits.
func (s *Server) GetLimits(ctx context.Context, req *pb.GetLimitsRequest) (*pb.LimitsResponse, error) {
	tenant := tenantOf(req.GetTenant())
	l, err := limits.Load(ctx, s.opts.Client, tenant)
	if err != nil {
		return nil, limitsStatus(err)
	}
	return limitsMsg(tenant, l), nil
}

// SetLimits changes a tenant's limits.
func (s *Server) SetLimits(ctx context.Context, req *pb.SetLimitsRequest) (*pb.LimitsResponse, error) {
	tenant := tenantOf(req.GetTenant())
	if len(req.GetSet()) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "no limit given (key=value; the limits: %s)", strings.Join(limits.Names(), ", "))
	}
	// Checked before etcd is read: a bad key is the caller's.
	if err := new(limits.Limits).Set(req.GetSet()...); err != nil {
		return nil, limitsStatus(err)
	}
	l, err := limits.Update(ctx, s.opts.Client, tenant, func(l *limits.Limits) error { return l.Set(req.GetSet()...) })
	if err != nil {
		return nil, limitsStatus(err)
	}
	s.log.Info("limits changed", "tenant", tenant, "set", strings.Join(req.GetSet(), " "))
	return limitsMsg(tenant, l), nil
}

func tenantOf(t string) string {
	if t == "" {
		return limits.DefaultTenant
	}
	return t
}

func limitsMsg(tenant string, l limits.Limits) *pb.LimitsResponse {
	out := &pb.LimitsResponse{Tenant: tenant}
	for _, k := range limits.Keys {
		out.Limits = append(out.Limits, &pb.Limit{Key: k.Name, Value: k.Value(l), Help: k.Help})
	}
	return out
}

func limitsStatus(err error) error {
	switch {
	case errors.Is(err, limits.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unavailable, err.Error())
}
