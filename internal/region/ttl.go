package region

import (
	"context"
	"fmt"
	"slices"

	"github.com/stratadb/strata/internal/manifest"
)

// ExpireTTL drops from the manifest every SST whose newest row is older than
// the TTL. The files move to the removed set, where GC deletes them after
// the lingering time; scans already hide their rows. Without a TTL it does
// nothing.
func (r *Region) ExpireTTL(ctx context.Context) error {
	if r.opts.TTL <= 0 {
		return nil
	}
	if err := r.usable(); err != nil {
		return err
	}
	// Serialize with flushes so that edits do not race on the manifest's
	// live set.
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	return r.expire(ctx)
}

// expire is ExpireTTL with flushMu held.
func (r *Region) expire(ctx context.Context) error {
	cutoff := r.ttlCutoff()
	var expired []string
	for id, f := range r.man.State().Files {
		if f.MaxTS < cutoff {
			expired = append(expired, id)
		}
	}
	if len(expired) == 0 {
		return nil
	}
	slices.Sort(expired)
	if err := r.commit(ctx, manifest.Action{Edit: &manifest.Edit{Remove: expired}}); err != nil {
		if !r.landed(ctx, func(s *manifest.State) bool { _, live := s.Files[expired[0]]; return !live }) {
			return r.setFatal(fmt.Errorf("region %s: expire %d files: %w", r.id, len(expired), err))
		}
	}
	r.opts.Metrics.ExpiredFiles.Add(float64(len(expired)))
	r.warmCardinality()
	r.log.Info("ttl expired files", "files", len(expired), "cutoff", cutoff)
	return nil
}
