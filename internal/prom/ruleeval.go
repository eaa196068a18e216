package prom

import (
	"context"
	"net/http"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
)

// What rule evaluation (package rules) shares with the query API: the
// engine, so that a rule's expression is evaluated with the options and
// limits /api/v1/query has; its Queryable; and its query slots, so that
// rules and queries together evaluate at most Limits.Concurrency at once.

// Engine is the PromQL engine the API evaluates with.
func (a *API) Engine() *promql.Engine { return a.engine }

// Queryable is the storage the engine reads: the default tenant's series.
func (a *API) Queryable() storage.Queryable { return a.q }

// TenantQueryable is the storage the engine reads for tenant t: its
// series only (the rules of t's namespaces read it).
func (a *API) TenantQueryable(t string) storage.Queryable { return a.q.ForTenant(t) }

// Acquire waits for a query slot, within ctx and the query timeout; the
// caller calls release when its query is done.
func (a *API) Acquire(ctx context.Context) (release func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, a.limits.Timeout)
	defer cancel()
	release, aerr := a.acquire(ctx)
	if aerr != nil {
		return nil, aerr.err
	}
	return release, nil
}

// Respond writes data in the Prometheus API's success envelope.
func Respond(w http.ResponseWriter, data any) { respond(w, data) }

// FailBadData answers 400 with the Prometheus API's bad_data error.
func FailBadData(w http.ResponseWriter, err error) { fail(w, badData(err)) }
