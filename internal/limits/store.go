package limits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Prefix is where tenants' limits are kept, one key a tenant, under
// Strata's /strata/ (internal/cluster's Prefix).
const Prefix = "/strata/limits/"

// EtcdKey is tenant's key.
func EtcdKey(tenant string) string { return Prefix + tenant }

// Load reads tenant's limits (none stored: no limits).
func Load(ctx context.Context, cli *clientv3.Client, tenant string) (Limits, error) {
	if err := CheckTenant(tenant); err != nil {
		return Limits{}, err
	}
	resp, err := cli.Get(ctx, EtcdKey(tenant))
	if err != nil {
		return Limits{}, fmt.Errorf("limits: read %s: %w", EtcdKey(tenant), err)
	}
	if len(resp.Kvs) == 0 {
		return Limits{}, nil
	}
	l, err := decode(resp.Kvs[0].Value)
	if err != nil {
		return Limits{}, fmt.Errorf("limits: %s: %w", EtcdKey(tenant), err)
	}
	return l, nil
}

// Update changes tenant's limits with change, in a compare-and-swap on
// the key's mod revision (read again when another update won), and
// returns what it stored. Limits with every value 0 delete the key.
func Update(ctx context.Context, cli *clientv3.Client, tenant string, change func(*Limits) error) (Limits, error) {
	if err := CheckTenant(tenant); err != nil {
		return Limits{}, err
	}
	key := EtcdKey(tenant)
	for {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			return Limits{}, fmt.Errorf("limits: read %s: %w", key, err)
		}
		var cur []byte
		var mod int64
		if len(resp.Kvs) > 0 {
			cur, mod = resp.Kvs[0].Value, resp.Kvs[0].ModRevision
		}
		l, err := decode(cur)
		if err != nil {
			return Limits{}, fmt.Errorf("limits: %s: %w", key, err)
		}
		if err := change(&l); err != nil {
			return Limits{}, err
		}
		op := clientv3.OpDelete(key)
		if l != (Limits{}) {
			val, _ := json.Marshal(l)
			op = clientv3.OpPut(key, string(val))
		}
		tx, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).Then(op).Commit()
		if err != nil {
			return Limits{}, fmt.Errorf("limits: write %s: %w", key, err)
		}
		if tx.Succeeded {
			return l, nil
		}
	}
}

// Watcher holds every tenant's limits as etcd has them, following the
// keys under Prefix: a change reaches it within a watch event's delay.
type Watcher struct {
	cli  *clientv3.Client
	log  *slog.Logger
	cur  atomic.Pointer[map[string]Limits]
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu      sync.Mutex
	changed chan struct{} // closed at each change (tests wait on it)
}

// Watch loads every tenant's limits and follows them until Close. It fails
// if etcd cannot be read now; afterwards a broken watch is started again
// (reading every key again) until it is closed.
func Watch(ctx context.Context, cli *clientv3.Client, log *slog.Logger) (*Watcher, error) {
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{cli: cli, log: log, changed: make(chan struct{})}
	rev, err := w.load(ctx)
	if err != nil {
		return nil, err
	}
	bg, stop := context.WithCancel(context.Background())
	w.stop = stop
	w.wg.Add(1)
	go w.run(bg, rev)
	return w, nil
}

// Static is a watcher of fixed limits (tests, and a node with no etcd).
func Static(m map[string]Limits) *Watcher {
	w := &Watcher{changed: make(chan struct{})}
	w.set(m)
	return w
}

// For is tenant's limits (none: no limits).
func (w *Watcher) For(tenant string) Limits {
	if w == nil {
		return Limits{}
	}
	if m := w.cur.Load(); m != nil {
		return (*m)[tenant]
	}
	return Limits{}
}

// Changed is closed at the next change of any tenant's limits.
func (w *Watcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Close stops following etcd.
func (w *Watcher) Close() {
	if w.stop != nil {
		w.stop()
		w.wg.Wait()
	}
}

func (w *Watcher) set(m map[string]Limits) {
	w.cur.Store(&m)
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// load reads every key and returns the revision read at.
func (w *Watcher) load(ctx context.Context) (int64, error) {
	resp, err := w.cli.Get(ctx, Prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("limits: read %s: %w", Prefix, err)
	}
	m := map[string]Limits{}
	for _, kv := range resp.Kvs {
		tenant := strings.TrimPrefix(string(kv.Key), Prefix)
		l, err := decode(kv.Value)
		if err != nil {
			w.log.Warn("limits: a bad key ignored", "key", string(kv.Key), "err", err)
			continue
		}
		m[tenant] = l
	}
	w.set(m)
	return resp.Header.Revision, nil
}

func (w *Watcher) run(ctx context.Context, rev int64) {
	defer w.wg.Done()
	for {
		err := w.follow(ctx, rev)
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("limits: watch of etcd broken; reading again", "err", err)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			rev, err = w.load(rctx)
			cancel()
			if err == nil {
				break
			}
		}
	}
}

// follow applies the changes after rev until the watch breaks.
func (w *Watcher) follow(ctx context.Context, rev int64) error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range w.cli.Watch(ctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		if len(resp.Events) == 0 {
			continue
		}
		old := w.cur.Load()
		m := make(map[string]Limits, len(*old)+1)
		for k, v := range *old {
			m[k] = v
		}
		for _, ev := range resp.Events {
			tenant := strings.TrimPrefix(string(ev.Kv.Key), Prefix)
			if ev.Type == clientv3.EventTypeDelete {
				delete(m, tenant)
				continue
			}
			l, err := decode(ev.Kv.Value)
			if err != nil {
				w.log.Warn("limits: a bad key ignored", "key", string(ev.Kv.Key), "err", err)
				continue
			}
			m[tenant] = l
		}
		w.set(m)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("limits: etcd watch closed")
}
