// Package rules evaluates Prometheus recording and alerting rules inside
// Strata, with Prometheus' own rules manager, rule-file format and
// notifier: rule files are checked with rulefmt, expressions are
// evaluated by the query API's engine over its Queryable (package prom),
// their results (a recording rule's series, an alerting rule's ALERTS and
// ALERTS_FOR_STATE) are written through the path remote write takes
// (prom.Appendable), and alerts go to Alertmanager's API v2. It also
// serves /api/v1/rules, /api/v1/alerts and /-/reload (api.go).
//
// Rule files given to a standalone are evaluated there; rule groups
// loaded into the cluster (store.go: etcd, through metasrv's admin API)
// are evaluated each by one datanode at a time (cluster.go;
// docs/rules.md). A stored group is a tenant's (docs/tenants.md): it
// reads and writes that tenant's series (Manager.evalFor), and the API
// answers a request its tenant's groups only. The rule files' groups are
// the default tenant's.
package rules

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/notifier"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	promrules "github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/stratadb/strata/internal/prom"
	"github.com/stratadb/strata/internal/rules/rulestore"
	"github.com/stratadb/strata/internal/tenant"
)

// Defaults of Options, Prometheus' own (its --rules.alert.* flags).
const (
	DefaultInterval        = time.Minute
	DefaultOutageTolerance = time.Hour
	DefaultForGracePeriod  = 10 * time.Minute
	DefaultResendDelay     = time.Minute
)

// ErrBadRuleFiles is the class of a load refused because a rule file is
// missing or invalid; nothing of the files was applied.
var ErrBadRuleFiles = rulestore.ErrBadRuleFiles

// Options configure rule evaluation.
type Options struct {
	// Files are the rule files, each a path or a filepath.Glob pattern.
	// A pattern that matches nothing loads nothing; a path without
	// pattern characters must exist.
	Files []string
	// Interval is the evaluation interval of a group that sets none
	// (default DefaultInterval).
	Interval time.Duration
	// AlertmanagerURLs are the Alertmanagers alerts are sent to, each a
	// base URL (http://host:9093, or with a path prefix and user:password).
	AlertmanagerURLs []string
	// Alertmanager is how they are reached beyond their URLs (TLS, a
	// bearer token).
	Alertmanager AlertmanagerClient
	// ExternalURL is this node's URL, for the generatorURL of alerts and
	// the $externalURL of templates.
	ExternalURL string
	// OutageTolerance, ForGracePeriod and ResendDelay are Prometheus'
	// --rules.alert.for-outage-tolerance, --rules.alert.for-grace-period
	// and --rules.alert.resend-delay (defaults: the Default* constants).
	OutageTolerance, ForGracePeriod, ResendDelay time.Duration
	// Registerer, if set, takes Prometheus' rule and notifier metrics
	// (prometheus_rule_*, prometheus_notifications_*).
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Lease, if set, is the rules lease's TTL for a server to put in
	// Cluster (ClusterOptions.Lease).
	Lease time.Duration
	// Cluster, if set, also evaluates the rule groups stored in etcd that
	// this datanode owns (cluster.go).
	Cluster *ClusterOptions
}

// Manager evaluates the rules of Options.Files, and with
// Options.Cluster the stored groups this node owns, and sends their
// alerts.
//
// Its life: New loads the files (nothing is evaluated yet); Start begins
// evaluation once the storage is ready; Reload loads the files again;
// Close stops evaluation and sends the alerts still queued.
type Manager struct {
	opts     Options
	parser   parser.Parser
	rules    *promrules.Manager
	notifier *notifier.Manager
	cancel   context.CancelFunc // ends evaluations in flight
	ready    context.Context    // cancelled by Close: Start stops waiting

	reloadMu sync.Mutex // serializes loads

	// Shared by the file groups' manager and the stored groups' ones.
	extURL      *url.URL
	queryFunc   promrules.QueryFunc
	notifyFunc  promrules.NotifyFunc
	api         *prom.API
	apps        *prom.Appendable
	app         storage.AppendableV2
	queryable   storage.Queryable
	ruleMetrics *promrules.Metrics
	cluster     *clusterRules // nil: no stored groups evaluated here

	startOnce    sync.Once
	running      chan struct{} // closed when the rules manager's Run returned
	notifierDone chan struct{} // closed when the notifier's Run returned
}

// New loads the rule files, failing with every problem of every file
// (ErrBadRuleFiles) if one is bad. Expressions are evaluated by api's
// engine over its Queryable, in its query slots; results are written to
// app. A stored group of a tenant other than the default reads that
// tenant's series and writes its metrics table (Manager.evalFor). Nothing
// is evaluated before Start.
func New(opts Options, api *prom.API, app *prom.Appendable) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Interval = cmpDuration(opts.Interval, DefaultInterval)
	opts.OutageTolerance = cmpDuration(opts.OutageTolerance, DefaultOutageTolerance)
	opts.ForGracePeriod = cmpDuration(opts.ForGracePeriod, DefaultForGracePeriod)
	opts.ResendDelay = cmpDuration(opts.ResendDelay, DefaultResendDelay)
	ext, err := url.Parse(opts.ExternalURL)
	if err != nil {
		return nil, fmt.Errorf("rules: external URL %q: %w", opts.ExternalURL, err)
	}
	ams, targets, err := alertmanagers(opts.AlertmanagerURLs, opts.Alertmanager)
	if err != nil {
		return nil, err
	}
	log := opts.Logger.With("component", "rules")
	n := notifier.NewManager(&notifier.Options{QueueCapacity: 10_000, DrainOnShutdown: true, Registerer: opts.Registerer}, model.UTF8Validation, opts.Logger.With("component", "notifier"))
	if err := n.ApplyConfig(ams); err != nil {
		return nil, fmt.Errorf("rules: alertmanagers: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{opts: opts, parser: parser.NewParser(parser.Options{}), notifier: n, cancel: cancel, ready: ctx,
		running: make(chan struct{}), notifierDone: make(chan struct{}),
		extURL: ext, notifyFunc: promrules.SendAlerts(n, opts.ExternalURL), api: api, apps: app, app: app, queryable: api.Queryable(),
		ruleMetrics: promrules.NewGroupMetrics(opts.Registerer)}
	m.queryFunc = m.slotted(promrules.EngineQueryFunc(api.Engine(), api.Queryable()))
	m.rules = promrules.NewManager(&promrules.ManagerOptions{
		ExternalURL:     ext,
		QueryFunc:       m.queryFunc,
		NotifyFunc:      m.notifyFunc,
		Context:         ctx,
		AppendableV2:    app,
		Queryable:       api.Queryable(),
		Logger:          log,
		Metrics:         m.ruleMetrics,
		OutageTolerance: opts.OutageTolerance,
		ForGracePeriod:  opts.ForGracePeriod,
		ResendDelay:     opts.ResendDelay,
		Parser:          m.parser,
	})
	tsets := make(chan map[string][]*targetgroup.Group, 1)
	tsets <- targets
	go func() {
		defer close(m.notifierDone)
		n.Run(tsets)
	}()
	if opts.Cluster != nil {
		m.cluster = newClusterRules(m, *opts.Cluster)
	}
	if err := m.Reload(); err != nil {
		m.Close(context.Background())
		return nil, err
	}
	return m, nil
}

// slotted is query taking one of the API's query slots while it runs.
func (m *Manager) slotted(query promrules.QueryFunc) promrules.QueryFunc {
	return func(ctx context.Context, q string, t time.Time) (promql.Vector, error) {
		release, err := m.api.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		return query(ctx, q, t)
	}
}

// tenantEval is what a tenant's groups are evaluated with.
type tenantEval struct {
	queryFunc promrules.QueryFunc
	queryable storage.Queryable
	app       storage.AppendableV2
}

// evalFor is how tenant t's stored groups are evaluated: their
// expressions read t's series only, their results are written to t's
// metrics table, by the path remote write of t takes. The default
// tenant's is what the rule files' groups use.
func (m *Manager) evalFor(t string) tenantEval {
	if t == tenant.Default || t == "" {
		return tenantEval{m.queryFunc, m.queryable, m.app}
	}
	q := m.api.TenantQueryable(t)
	return tenantEval{m.slotted(promrules.EngineQueryFunc(m.api.Engine(), q)), q, m.apps.ForTenant(t)}
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Start begins evaluation once ready returns (the storage the rules read
// and write is open); if it fails, evaluation begins anyway and the first
// evaluations may fail. A group's first evaluation is at its next
// interval boundary; an alert's `for` state is restored from
// ALERTS_FOR_STATE after its second (Prometheus' rule).
func (m *Manager) Start(ready func(context.Context) error) {
	go func() {
		if err := ready(m.ready); err != nil && m.ready.Err() == nil {
			m.opts.Logger.Warn("rules: the storage was not ready; evaluating anyway", "err", err)
		}
		m.run()
	}()
}

// run starts the rules manager's groups (once).
func (m *Manager) run() {
	m.startOnce.Do(func() {
		go func() {
			defer close(m.running)
			m.rules.Run()
		}()
		if m.cluster != nil && m.ready.Err() == nil {
			m.cluster.start()
		}
	})
}

// Reload loads the rule files again. If one is missing or bad, the error
// (ErrBadRuleFiles) names every problem with its file and line, and the
// rules loaded before stay as they are. Groups that did not change keep
// evaluating undisturbed; a changed group keeps its alerts' state.
func (m *Manager) Reload() error {
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	files, err := m.check()
	if err != nil {
		return err
	}
	// The files were read and checked just now; a file changed between
	// the check and this second read is refused here (and logged by the
	// rules manager), the previous rules kept.
	if err := m.rules.Update(m.opts.Interval, files, labels.EmptyLabels(), m.opts.ExternalURL, nil); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRuleFiles, err)
	}
	groups, rules := 0, 0
	for _, g := range m.rules.RuleGroups() {
		groups++
		rules += len(g.Rules())
	}
	m.opts.Logger.Info("rules loaded", "files", len(files), "groups", groups, "rules", rules)
	return nil
}

// check expands Options.Files and parses and validates every file with
// rulefmt, as Prometheus does; it returns the files, or every problem.
func (m *Manager) check() ([]string, error) {
	var files, problems []string
	for _, pat := range m.opts.Files {
		matches, err := filepath.Glob(pat)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", pat, err))
			continue
		}
		if len(matches) == 0 && !hasMeta(pat) {
			if _, err := os.Stat(pat); err != nil {
				problems = append(problems, err.Error())
			}
		}
		files = append(files, matches...)
	}
	slices.Sort(files)
	files = slices.Compact(files)
	for _, f := range files {
		if _, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, m.parser, m.opts.Logger); len(errs) > 0 {
			for _, err := range errs {
				problems = append(problems, err.Error())
			}
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w (nothing of them applied):\n  %s", ErrBadRuleFiles, strings.Join(problems, "\n  "))
	}
	return files, nil
}

// hasMeta reports whether path has filepath.Match's pattern characters.
func hasMeta(path string) bool { return strings.ContainsAny(path, `*?[\`) }

// Groups are the rule groups evaluated here (the rule files', then the
// stored groups this datanode owns, of every tenant), ordered by file and
// name.
func (m *Manager) Groups() []*promrules.Group {
	gs := m.rules.RuleGroups()
	if m.cluster != nil {
		for _, g := range m.cluster.running() {
			gs = append(gs, g.Group)
		}
	}
	slices.SortStableFunc(gs, func(a, b *promrules.Group) int {
		return cmp.Or(strings.Compare(a.File(), b.File()), strings.Compare(a.Name(), b.Name()))
	})
	return gs
}

// Close stops evaluation (an evaluation in flight is cancelled; no
// staleness markers are written, so a restart restores the alerts' state)
// and sends the alerts still queued, within ctx.
func (m *Manager) Close(ctx context.Context) {
	m.cancel()
	m.run() // the groups wait for Run to start before they can stop
	if m.cluster != nil {
		m.cluster.close()
	}
	m.rules.Stop()
	<-m.running
	m.notifier.Stop()
	select {
	case <-m.notifierDone:
	case <-ctx.Done():
		m.opts.Logger.Warn("rules: alerts still queued for Alertmanager at shutdown were dropped", "err", ctx.Err())
	}
}
