package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The catalog's etcd keys (docs/cluster.md): each record under EtcdPrefix
// (EtcdPrefix + "tables/{name}", ...), and headKey, which every commit
// writes, so that its mod revision is the revision of the newest commit.
const (
	EtcdPrefix = "/strata/catalog/"
	headKey    = EtcdPrefix + "head"
	// LegacyEtcdKey held the whole catalog as one JSON value, which grew
	// with every table until etcd refused it. Opening a catalog moves it to
	// one key per record and leaves legacyMoved in its place.
	LegacyEtcdKey = "/strata/catalog"
	// legacyMoved is not JSON: a process of a Strata from before the move
	// fails to read it instead of starting an empty catalog beside the
	// moved one.
	legacyMoved = "moved: one key per table under /strata/catalog/ (docs/cluster.md)"
)

// Limits of the transactions that write many records (migrate, import),
// below etcd's defaults (--max-txn-ops 128, --max-request-bytes 1.5 MiB).
const (
	batchOps   = 100
	batchBytes = 512 << 10
	loadPage   = 500 // keys per page of a full read
)

// EtcdBackend keeps the catalog in etcd, one key per record: a commit is
// one transaction that compares and writes only the records it changes,
// and the catalog follows the prefix with a watch.
type EtcdBackend struct{ cli *clientv3.Client }

// NewEtcdBackend is the catalog backend over cli.
func NewEtcdBackend(cli *clientv3.Client) *EtcdBackend { return &EtcdBackend{cli: cli} }

var (
	_ Backend = (*EtcdBackend)(nil)
	_ Watcher = (*EtcdBackend)(nil)
)

func recordOf(kv interface {
	GetKey() []byte
	GetValue() []byte
	GetModRevision() int64
}, at int64) Record {
	return Record{Key: strings.TrimPrefix(string(kv.GetKey()), EtcdPrefix), Value: kv.GetValue(), Mod: kv.GetModRevision(), At: at}
}

// Load reads every record, in pages at one revision, after moving a
// catalog kept under LegacyEtcdKey.
func (b *EtcdBackend) Load(ctx context.Context) ([]Record, int64, error) {
	if err := b.migrate(ctx); err != nil {
		return nil, 0, err
	}
	for {
		recs, rev, err := b.load(ctx)
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue // the revision of the first page is gone: read all again
		}
		return recs, rev, err
	}
}

func (b *EtcdBackend) load(ctx context.Context) ([]Record, int64, error) {
	var recs []Record
	var rev int64
	from, end := EtcdPrefix, clientv3.GetPrefixRangeEnd(EtcdPrefix)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(loadPage)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := b.cli.Get(ctx, from, opts...)
		if err != nil {
			return nil, 0, fmt.Errorf("catalog: read etcd: %w", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if string(kv.Key) != headKey {
				recs = append(recs, recordOf(kv, rev))
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return recs, rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Get reads the records of keys in one transaction.
func (b *EtcdBackend) Get(ctx context.Context, keys []string) ([]Record, error) {
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(EtcdPrefix + k)
	}
	resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("read etcd: %w", err)
	}
	return rangeRecords(keys, resp), nil
}

// rangeRecords are the records of keys read by resp's responses (one range
// each, in order).
func rangeRecords(keys []string, resp *clientv3.TxnResponse) []Record {
	out := make([]Record, len(keys))
	for i, k := range keys {
		out[i] = Record{Key: k, At: resp.Header.Revision}
		if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
			out[i] = recordOf(kvs[0], resp.Header.Revision)
		}
	}
	return out
}

// Commit is one transaction: if every key of cmps is at its mod revision,
// it writes ops and headKey; otherwise it reads cmps' keys.
func (b *EtcdBackend) Commit(ctx context.Context, cmps []Cmp, ops []Op) (int64, []Record, error) {
	conds := make([]clientv3.Cmp, len(cmps))
	gets := make([]clientv3.Op, len(cmps))
	keys := make([]string, len(cmps))
	for i, c := range cmps {
		conds[i] = clientv3.Compare(clientv3.ModRevision(EtcdPrefix+c.Key), "=", c.Mod)
		gets[i] = clientv3.OpGet(EtcdPrefix + c.Key)
		keys[i] = c.Key
	}
	writes := make([]clientv3.Op, 0, len(ops)+1)
	for _, op := range ops {
		if op.Value == nil {
			writes = append(writes, clientv3.OpDelete(EtcdPrefix+op.Key))
		} else {
			writes = append(writes, clientv3.OpPut(EtcdPrefix+op.Key, string(op.Value)))
		}
	}
	writes = append(writes, clientv3.OpPut(headKey, ""))
	resp, err := b.cli.Txn(ctx).If(conds...).Then(writes...).Else(gets...).Commit()
	if err != nil {
		return 0, nil, fmt.Errorf("commit to etcd: %w", err)
	}
	if !resp.Succeeded {
		return 0, rangeRecords(keys, resp), ErrConflict
	}
	return resp.Header.Revision, nil, nil
}

// Head is the mod revision of headKey.
func (b *EtcdBackend) Head(ctx context.Context) (int64, error) {
	resp, err := b.cli.Get(ctx, headKey, clientv3.WithKeysOnly())
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].ModRevision, nil
}

// Watch watches EtcdPrefix from rev+1. It ends when etcd has no leader, so
// a member cut off from the others does not leave the catalog stale.
func (b *EtcdBackend) Watch(ctx context.Context, rev int64, apply func([]Record, int64)) error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wc := b.cli.Watch(ctx, EtcdPrefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for resp := range wc {
		if resp.CompactRevision != 0 {
			return ErrCompacted
		}
		if err := resp.Err(); err != nil {
			return fmt.Errorf("catalog: watch etcd: %w", err)
		}
		if len(resp.Events) == 0 {
			// The watch's creation (its header is etcd's revision, not
			// how far the events reached) or a progress notice.
			if resp.IsProgressNotify() {
				apply(nil, resp.Header.Revision) // every change up to it was sent
			}
			continue
		}
		recs := make([]Record, 0, len(resp.Events))
		var upTo int64
		for _, ev := range resp.Events {
			upTo = ev.Kv.ModRevision
			if string(ev.Kv.Key) == headKey {
				continue
			}
			r := recordOf(ev.Kv, ev.Kv.ModRevision)
			if ev.Type == clientv3.EventTypeDelete {
				r.Value, r.Mod = nil, 0
			}
			recs = append(recs, r)
		}
		apply(recs, upTo)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("catalog: etcd watch closed")
}

// TablesChanged reports whether ev, an event of a key under EtcdPrefix,
// changes the set of tables not being dropped (what metasrv places): a
// table created, marked dropping or forgotten; not new columns.
func TablesChanged(ev *clientv3.Event) bool {
	if !strings.HasPrefix(string(ev.Kv.Key), EtcdPrefix+tablesDir) {
		return false
	}
	if ev.Type == clientv3.EventTypeDelete || ev.IsCreate() {
		return true
	}
	var t struct {
		Dropping bool `json:"dropping"`
	}
	return json.Unmarshal(ev.Kv.Value, &t) != nil || t.Dropping
}

// migrate moves a catalog kept under LegacyEtcdKey to one key per record.
// It can run in several processes at once, and again after a crash: every
// transaction compares the legacy key's mod revision with the one read,
// and the last one replaces its value with legacyMoved; a process that
// finds the key changed starts over, one that finds legacyMoved is done.
func (b *EtcdBackend) migrate(ctx context.Context) error {
	for {
		resp, err := b.cli.Get(ctx, LegacyEtcdKey)
		if err != nil {
			return fmt.Errorf("catalog: read etcd: %w", err)
		}
		if len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) == legacyMoved {
			return nil
		}
		kv := resp.Kvs[0]
		st, err := ParseWhole(kv.Value)
		if err != nil {
			return fmt.Errorf("catalog: the value of %s is corrupt: %w", LegacyEtcdKey, err)
		}
		recs := st.Records()
		guard := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(LegacyEtcdKey), "=", kv.ModRevision)}
		err = b.writeAll(ctx, guard, recs, clientv3.OpPut(LegacyEtcdKey, legacyMoved))
		if !errors.Is(err, ErrConflict) {
			return err
		}
	}
}

// Import copies the catalog that load reads (an offline store's:
// storecat.Import) into etcd, if etcd has none in either layout, and
// reports whether it did. load runs only if etcd has none; a version of
// 0 means there is nothing to import.
func Import(ctx context.Context, cli *clientv3.Client, load func(context.Context) ([]Record, int64, error)) (bool, error) {
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(headKey, clientv3.WithCountOnly()), clientv3.OpGet(LegacyEtcdKey, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return false, fmt.Errorf("catalog: read etcd: %w", err)
	}
	if resp.Responses[0].GetResponseRange().Count > 0 || resp.Responses[1].GetResponseRange().Count > 0 {
		return false, nil
	}
	recs, v, err := load(ctx)
	if err != nil || v == 0 {
		return false, err
	}
	guard := []clientv3.Cmp{clientv3.Compare(clientv3.Version(headKey), "=", 0), clientv3.Compare(clientv3.Version(LegacyEtcdKey), "=", 0)}
	err = (&EtcdBackend{cli: cli}).writeAll(ctx, guard, recs)
	if errors.Is(err, ErrConflict) {
		return false, nil // another process wrote a catalog first
	}
	return err == nil, err
}

// writeAll makes recs the records under EtcdPrefix: it deletes the keys
// there that recs do not have (left by an earlier run that did not
// finish), writes recs, and then final and headKey, in transactions of at
// most batchOps writes and about batchBytes, each only if guard holds
// (ErrConflict otherwise). The records are not one atomic change: the
// callers keep catalogs from reading them until the last transaction
// lands (migrate: an opening catalog moves the legacy key first; import: a
// standalone imports before it opens its catalog).
func (b *EtcdBackend) writeAll(ctx context.Context, guard []clientv3.Cmp, recs []Record, final ...clientv3.Op) error {
	want := make(map[string]bool, len(recs))
	for _, r := range recs {
		want[EtcdPrefix+r.Key] = true
	}
	var ops []clientv3.Op
	size := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		resp, err := b.cli.Txn(ctx).If(guard...).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("catalog: write etcd: %w", err)
		}
		if !resp.Succeeded {
			return ErrConflict
		}
		ops, size = ops[:0], 0
		return nil
	}
	add := func(op clientv3.Op, n int) error {
		if len(ops) == batchOps || size+n > batchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		ops, size = append(ops, op), size+n
		return nil
	}
	from, end := EtcdPrefix, clientv3.GetPrefixRangeEnd(EtcdPrefix)
	for {
		resp, err := b.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(loadPage), clientv3.WithKeysOnly())
		if err != nil {
			return fmt.Errorf("catalog: read etcd: %w", err)
		}
		for _, kv := range resp.Kvs {
			if k := string(kv.Key); !want[k] && k != headKey {
				if err := add(clientv3.OpDelete(k), len(k)); err != nil {
					return err
				}
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	for _, r := range recs {
		if err := add(clientv3.OpPut(EtcdPrefix+r.Key, string(r.Value)), len(r.Key)+len(r.Value)); err != nil {
			return err
		}
	}
	if err := flush(); err != nil {
		return err
	}
	ops = append(ops, final...) // ops is empty after a flush
	ops = append(ops, clientv3.OpPut(headKey, ""))
	return flush()
}
