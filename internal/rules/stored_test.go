package rules_test

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stratadb/strata/internal/cluster/clustertest"
	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/rules"
	pb "github.com/stratadb/strata/proto/strata/v1"
)

// TestStoredGroupsBesideRuleFiles: a standalone evaluates groups loaded
// through its admin API beside its rule file's; loading a changed group
// changes what is evaluated (the alert's state kept), deleting it stops
// it; the file's group is untouched throughout.
func TestStoredGroupsBesideRuleFiles(t *testing.T) {
	dir := rulesDir(t)
	writeFile(t, filepath.Join(dir, "file.yml"), "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - record: from:file\n        expr: vector(7)\n")
	n := start(t, t.TempDir(), objstoretest.Mem(t), rules.Options{Files: []string{filepath.Join(dir, "*.yml")}})
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewMetaAdminClient(conn)
	ctx := context.Background()
	load := func(content string) {
		t.Helper()
		if _, err := c.LoadRules(ctx, &pb.LoadRulesRequest{Files: []*pb.RuleFile{{Namespace: "ns", Name: "ns.yml", Content: []byte(content)}}}); err != nil {
			t.Fatal(err)
		}
	}
	group := func(v int) string {
		return fmt.Sprintf("groups:\n  - name: g\n    interval: 1s\n    rules:\n      - record: stored\n        expr: vector(%d)\n      - alert: On\n        expr: vector(1)\n        for: 1h\n", v)
	}
	value := func(q string) string {
		var r struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		}
		n.get("/api/v1/query", url.Values{"query": {q}}, &r)
		if len(r.Result) != 1 {
			return ""
		}
		return r.Result[0].Value[1].(string)
	}
	load(group(1))
	clustertest.Until(t, time.Minute, "stored group recorded", func() (bool, string) { v := value("stored"); return v == "1", v })
	clustertest.Until(t, time.Minute, "file group recorded", func() (bool, string) { v := value("from:file"); return v == "7", v })
	var activeAt time.Time
	clustertest.Until(t, time.Minute, "both groups in /api/v1/rules, the alert pending", func() (bool, string) {
		r := n.rules(nil)
		files := map[string]bool{}
		for _, g := range r.Groups {
			files[g.File] = true
		}
		as := n.alerts()
		if len(as) == 1 {
			activeAt = as[0].ActiveAt
		}
		return len(r.Groups) == 2 && files["ns"] && len(as) == 1 && as[0].State == "pending", fmt.Sprintf("%+v %+v", r.Groups, as)
	})

	load(group(2))
	clustertest.Until(t, time.Minute, "the changed group recorded", func() (bool, string) { v := value("stored"); return v == "2", v })
	if as := n.alerts(); len(as) != 1 || !as[0].ActiveAt.Equal(activeAt) {
		t.Fatalf("after the change the alert is %+v, want it active since %v", as, activeAt)
	}

	if _, err := c.DeleteRules(ctx, &pb.DeleteRulesRequest{Namespace: "ns"}); err != nil {
		t.Fatal(err)
	}
	clustertest.Until(t, time.Minute, "the deleted group gone from /api/v1/rules", func() (bool, string) {
		r := n.rules(nil)
		return len(r.Groups) == 1 && r.Groups[0].File != "ns", fmt.Sprintf("%+v", r.Groups)
	})
	if v := value("from:file"); v != "7" {
		t.Fatalf("the file's group: %q", v)
	}
}
