// Package objstore is the only code in Strata that talks to object storage.
//
// It offers a narrow Bucket interface (context first, whole objects, range
// reads, create-if-absent, paginated listing) over gocloud.dev/blob, with one
// error classification, bounded retries for transient failures and request
// counters by operation. Backends are chosen by URL: file:///dir, s3://bucket
// and mem://.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Op names a kind of object-store request, as counted in metrics.
type Op string

// The request kinds. CreateIfAbsent and Put are PUTs; GetRange is a GET.
const (
	OpGet    Op = "GET"
	OpPut    Op = "PUT"
	OpList   Op = "LIST"
	OpDelete Op = "DELETE"
	OpHead   Op = "HEAD"
)

// Ops lists every Op, in a stable order.
var Ops = []Op{OpGet, OpPut, OpList, OpDelete, OpHead}

// Sentinel errors that callers act on. Backend errors are wrapped so that
// errors.Is works with these.
var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("objstore: object not found")
	// ErrPreconditionFailed: a create-if-absent lost the race; the object
	// already exists.
	ErrPreconditionFailed = errors.New("objstore: precondition failed: object already exists")
	// ErrInvalidKey: the key is not a valid Strata object key.
	ErrInvalidKey = errors.New("objstore: invalid key")
	// ErrTransient marks a failure that may succeed if tried again
	// (network errors, throttling, 5xx). It is returned wrapped only after
	// retries are exhausted.
	ErrTransient = errors.New("objstore: transient failure")
)

// Attrs are an object's attributes.
type Attrs struct {
	Size    int64
	ModTime time.Time
}

// Object is one entry of a listing.
type Object struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Page is one page of a listing. NextToken is nil on the last page.
type Page struct {
	Objects   []Object
	NextToken []byte
}

// Bucket is an object store. Implementations are safe for concurrent use.
//
// Contracts:
//   - Put replaces the object atomically: readers see the old or the new
//     bytes, never a mix.
//   - CreateIfAbsent creates the object only if no object has the key, and
//     returns ErrPreconditionFailed otherwise. It is atomic across processes.
//   - Delete of an absent object succeeds (deletes are idempotent).
//   - Get, GetRange, ReadRange and Attributes of an absent object return
//     ErrNotFound.
type Bucket interface {
	Get(ctx context.Context, key string) ([]byte, error)
	// GetRange reads length bytes from offset; length < 0 reads to the end.
	GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error)
	// ReadRange reads len(buf) bytes from offset into buf, which a caller
	// reading many ranges can reuse; it returns fewer only if the object
	// ends first.
	ReadRange(ctx context.Context, key string, offset int64, buf []byte) (int, error)
	Put(ctx context.Context, key string, data []byte) error
	CreateIfAbsent(ctx context.Context, key string, data []byte) error
	Delete(ctx context.Context, key string) error
	// List returns one page of the objects whose keys start with prefix,
	// in lexical key order. A nil token asks for the first page.
	List(ctx context.Context, prefix string, token []byte, pageSize int) (Page, error)
	Attributes(ctx context.Context, key string) (Attrs, error)
	Close() error
}

// ListAll lists every object under prefix, page by page.
func ListAll(ctx context.Context, b Bucket, prefix string, pageSize int) ([]Object, error) {
	var all []Object
	var token []byte
	for {
		p, err := b.List(ctx, prefix, token, pageSize)
		if err != nil {
			return nil, err
		}
		all = append(all, p.Objects...)
		if len(p.NextToken) == 0 {
			return all, nil
		}
		token = p.NextToken
	}
}

// DeletePrefix deletes every object under prefix (listed, then deleted
// in batches: DeleteMany) and returns how many it deleted. Deleting an
// object already gone is not an error; an object whose delete failed is
// left (run it again to finish).
func DeletePrefix(ctx context.Context, b Bucket, prefix string) (int, error) {
	objs, err := ListAll(ctx, b, prefix, 1000)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", prefix, err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	failed, err := DeleteMany(ctx, b, keys)
	if err != nil {
		return len(keys) - len(failed), fmt.Errorf("delete under %s: %d of %d objects left: %w", prefix, len(failed), len(keys), err)
	}
	return len(keys), nil
}

// tmpDir is where the file backend stages writes; it is hidden from listings.
const tmpDir = ".strata-tmp"

// ValidateKey reports whether key is a valid object key: non-empty, made of
// [A-Za-z0-9._-] segments separated by single slashes, with no "." or ".."
// segment and no segment starting with ".strata-tmp".
func ValidateKey(key string) error {
	if key == "" || len(key) > 1024 {
		return fmt.Errorf("%w: %q", ErrInvalidKey, key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, tmpDir) {
			return fmt.Errorf("%w: %q", ErrInvalidKey, key)
		}
		for _, c := range seg {
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
			if !ok {
				return fmt.Errorf("%w: %q", ErrInvalidKey, key)
			}
		}
	}
	return nil
}

// OpError describes a failed request. It unwraps to the classified sentinel
// (ErrNotFound, ErrPreconditionFailed, ErrTransient) if any, and to the cause.
type OpError struct {
	Op    Op
	Key   string
	Kind  error // one of the sentinels, or nil for a permanent failure
	Cause error
}

func (e *OpError) Error() string {
	if e.Kind != nil && e.Cause == nil {
		return fmt.Sprintf("%s %q: %v", e.Op, e.Key, e.Kind)
	}
	if e.Kind != nil {
		return fmt.Sprintf("%s %q: %v: %v", e.Op, e.Key, e.Kind, e.Cause)
	}
	return fmt.Sprintf("%s %q: %v", e.Op, e.Key, e.Cause)
}

// Unwrap returns the sentinel and the cause.
func (e *OpError) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Cause != nil {
		errs = append(errs, e.Cause)
	}
	return errs
}

// IsTransient reports whether err is worth retrying.
func IsTransient(err error) bool { return errors.Is(err, ErrTransient) }
