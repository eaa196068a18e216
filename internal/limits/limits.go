// Package limits holds the limits of a tenant (docs/limits.md): what it
// may write (active series per table and in all, samples per second with
// a burst, label names per series, label value length) and what a query
// may read (samples and series). A tenant's limits are one etcd key,
// /strata/limits/<tenant> (JSON), changed at run time through metasrv's
// admin API (`strata limits set`); every datanode watches the keys
// (Watcher), so a change takes effect without a restart.
//
// A request's tenant is named by its X-Scope-OrgID header
// (internal/tenant, docs/tenants.md); without it, DefaultTenant.
//
// A limit of 0 is no limit: a tenant with no key, or a key without a
// limit, writes and queries as before limits existed.
//
// The package links no data plane (metasrv uses it): it knows limits,
// their store, a token bucket and a set of series hashes, not rows.
package limits

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	tenants "github.com/stratadb/strata/internal/tenant"
)

// DefaultTenant is the tenant of a request that names none.
const DefaultTenant = tenants.Default

// Limits are a tenant's limits; 0 is no limit.
type Limits struct {
	// MaxActiveSeriesPerTable bounds the active series of one table
	// (remote write and OTLP write one table, __metrics).
	MaxActiveSeriesPerTable int64 `json:"max_active_series_per_table,omitempty"`
	// MaxActiveSeries bounds the tenant's active series, all tables.
	MaxActiveSeries int64 `json:"max_active_series,omitempty"`
	// IngestionRate bounds the rows (samples) written per second, a
	// token bucket of IngestionBurst tokens (0: IngestionRate, at
	// least 1).
	IngestionRate  float64 `json:"ingestion_rate,omitempty"`
	IngestionBurst int64   `json:"ingestion_burst,omitempty"`
	// MaxLabelNamesPerSeries bounds a series' labels (tags), __name__
	// among them.
	MaxLabelNamesPerSeries int64 `json:"max_label_names_per_series,omitempty"`
	// MaxLabelValueLength bounds a label value's bytes.
	MaxLabelValueLength int64 `json:"max_label_value_length,omitempty"`
	// MaxSamplesPerQuery and MaxSeriesPerQuery bound a PromQL query.
	MaxSamplesPerQuery int64 `json:"max_samples_per_query,omitempty"`
	MaxSeriesPerQuery  int64 `json:"max_series_per_query,omitempty"`
}

// Key is one limit, as the CLI and the admin API name it.
type Key struct {
	Name string
	Help string
	// Float: the value may have a fraction (a rate).
	Float bool
	get   func(*Limits) float64
	set   func(*Limits, float64)
}

func intKey(name, help string, f func(*Limits) *int64) Key {
	return Key{Name: name, Help: help,
		get: func(l *Limits) float64 { return float64(*f(l)) },
		set: func(l *Limits, v float64) { *f(l) = int64(v) }}
}

// Keys are every limit, in the order they are listed.
var Keys = []Key{
	intKey("max_active_series_per_table", "active series of one table (written through this datanode within the active window); the excess new series are refused, 400", func(l *Limits) *int64 { return &l.MaxActiveSeriesPerTable }),
	intKey("max_active_series", "active series of the tenant, all tables; the excess new series are refused, 400", func(l *Limits) *int64 { return &l.MaxActiveSeries }),
	{Name: "ingestion_rate", Help: "rows (samples) written per second, per datanode; a request over it is refused, 429", Float: true,
		get: func(l *Limits) float64 { return l.IngestionRate }, set: func(l *Limits, v float64) { l.IngestionRate = v }},
	intKey("ingestion_burst", "rows (samples) a datanode takes at once above ingestion_rate (0: one second's worth)", func(l *Limits) *int64 { return &l.IngestionBurst }),
	intKey("max_label_names_per_series", "labels (tags) of one series, __name__ among them; a request with a series over it is refused, 400", func(l *Limits) *int64 { return &l.MaxLabelNamesPerSeries }),
	intKey("max_label_value_length", "bytes of one label (tag) value; a request with a value over it is refused, 400", func(l *Limits) *int64 { return &l.MaxLabelValueLength }),
	intKey("max_samples_per_query", "samples a PromQL query reads or holds at once; over it the query fails, 422", func(l *Limits) *int64 { return &l.MaxSamplesPerQuery }),
	intKey("max_series_per_query", "series a PromQL query selects; over it the query fails, 422", func(l *Limits) *int64 { return &l.MaxSeriesPerQuery }),
}

// KeyNamed is the key of that name.
func KeyNamed(name string) (Key, bool) {
	for _, k := range Keys {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

// ErrInvalid: a bad limit, value or tenant name.
var ErrInvalid = errors.New("invalid limit")

// Value is the key's value in l: "0" is no limit.
func (k Key) Value(l Limits) string {
	return strconv.FormatFloat(k.get(&l), 'f', -1, 64)
}

// Set parses name=value assignments into l. A value of 0, "" or
// "unlimited" removes the limit.
func (l *Limits) Set(assignments ...string) error {
	for _, a := range assignments {
		name, value, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%w: %q is not key=value", ErrInvalid, a)
		}
		if err := l.SetKey(strings.TrimSpace(name), strings.TrimSpace(value)); err != nil {
			return err
		}
	}
	return nil
}

// SetKey sets one limit from its text.
func (l *Limits) SetKey(name, value string) error {
	k, ok := KeyNamed(name)
	if !ok {
		return fmt.Errorf("%w: no limit %q (the limits: %s)", ErrInvalid, name, strings.Join(Names(), ", "))
	}
	if value == "" || value == "unlimited" {
		k.set(l, 0)
		return nil
	}
	v, err := strconv.ParseFloat(value, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || (!k.Float && v != math.Trunc(v)) || v > math.MaxInt64/2 {
		kind := "a whole number"
		if k.Float {
			kind = "a number"
		}
		return fmt.Errorf("%w: %s=%s: the value must be %s, 0 or more (0: unlimited)", ErrInvalid, name, value, kind)
	}
	k.set(l, v)
	return nil
}

// Names are the keys' names.
func Names() []string {
	out := make([]string, len(Keys))
	for i, k := range Keys {
		out[i] = k.Name
	}
	return out
}

// Burst is the token bucket's size: IngestionBurst, or one second's
// worth of IngestionRate (at least 1).
func (l Limits) Burst() float64 {
	if l.IngestionBurst > 0 {
		return float64(l.IngestionBurst)
	}
	return max(1, math.Ceil(l.IngestionRate))
}

// CheckTenant refuses a tenant name Mimir would refuse (its X-Scope-OrgID
// characters), or one that cannot be an etcd key's last part
// (tenant.Check).
func CheckTenant(name string) error {
	if err := tenants.Check(name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// decode reads a key's value (empty: no limits).
func decode(b []byte) (Limits, error) {
	var l Limits
	if len(b) == 0 {
		return l, nil
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return Limits{}, err
	}
	return l, nil
}
