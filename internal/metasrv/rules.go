package metasrv

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stratadb/strata/internal/rules/rulestore"
	"github.com/stratadb/strata/internal/tenant"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// Rule groups are stored in etcd (package rulestore); any replica serves
// these calls, each one etcd transaction. The datanodes watch the keys.
// A call is about its tenant's namespaces only (tenant.Incoming: the
// x-scope-orgid metadata, the default tenant without it).

// LoadRules validates every file and replaces each file's namespace.
func (s *Server) LoadRules(ctx context.Context, req *pb.LoadRulesRequest) (*pb.LoadRulesResponse, error) {
	if len(req.GetFiles()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no rule file given")
	}
	files := make([]rulestore.RuleFile, len(req.GetFiles()))
	for i, f := range req.GetFiles() {
		files[i] = rulestore.RuleFile{Namespace: f.GetNamespace(), Name: f.GetName(), Content: f.GetContent()}
		if files[i].Name == "" {
			files[i].Name = f.GetNamespace()
		}
	}
	t, err := tenant.Incoming(ctx)
	if err != nil {
		return nil, err
	}
	res, err := rulestore.LoadTenant(ctx, s.opts.Client, t, files)
	if err != nil {
		return nil, rulesStatus(err)
	}
	out := &pb.LoadRulesResponse{Removed: res.Removed}
	for _, g := range res.Groups {
		out.Groups = append(out.Groups, groupInfo(rulestore.StoredGroupInfo{StoredGroup: g}))
	}
	s.log.Info("rules loaded", "tenant", t, "namespaces", len(files), "groups", len(res.Groups), "removed", len(res.Removed))
	return out, nil
}

// ListRules lists the stored groups and their evaluators.
func (s *Server) ListRules(ctx context.Context, req *pb.ListRulesRequest) (*pb.ListRulesResponse, error) {
	t, err := tenant.Incoming(ctx)
	if err != nil {
		return nil, err
	}
	gs, err := rulestore.ListTenant(ctx, s.opts.Client, t, req.GetNamespace())
	if err != nil {
		return nil, rulesStatus(err)
	}
	out := &pb.ListRulesResponse{}
	for _, g := range gs {
		out.Groups = append(out.Groups, groupInfo(g))
	}
	return out, nil
}

// DeleteRules removes a namespace or one of its groups.
func (s *Server) DeleteRules(ctx context.Context, req *pb.DeleteRulesRequest) (*pb.DeleteRulesResponse, error) {
	t, err := tenant.Incoming(ctx)
	if err != nil {
		return nil, err
	}
	n, err := rulestore.DeleteTenant(ctx, s.opts.Client, t, req.GetNamespace(), req.GetGroup())
	if err != nil {
		return nil, rulesStatus(err)
	}
	s.log.Info("rules deleted", "tenant", t, "namespace", req.GetNamespace(), "group", req.GetGroup(), "groups", n)
	return &pb.DeleteRulesResponse{Deleted: int32(n)}, nil
}

func groupInfo(g rulestore.StoredGroupInfo) *pb.RuleGroupInfo {
	info := &pb.RuleGroupInfo{Namespace: g.Namespace, Name: g.Group.Name, IntervalSeconds: int64(time.Duration(g.Group.Interval).Seconds()),
		Owner: g.Owner, Content: string(g.Content)}
	for _, r := range g.Group.Rules {
		if r.Alert != "" {
			info.AlertingRules++
		} else {
			info.RecordingRules++
		}
	}
	return info
}

func rulesStatus(err error) error {
	switch {
	case errors.Is(err, rulestore.ErrBadRuleFiles), errors.Is(err, rulestore.ErrBadNamespace), errors.Is(err, tenant.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, rulestore.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unavailable, err.Error())
}
