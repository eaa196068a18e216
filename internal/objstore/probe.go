package objstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrNoConditionalCreate: the store accepted a create-if-absent over an
// existing object. Every fence Strata has (manifest versions, WAL
// segments) relies on that create failing, so such a store is refused.
var ErrNoConditionalCreate = errors.New("objstore: the store does not honour conditional create (If-None-Match: *)")

// ProbePrefix is where CheckConditionalCreate writes its probe; nothing
// else is ever written there.
const ProbePrefix = "strata-probe/"

// CheckConditionalCreate proves that the store at endpoint honours
// create-if-absent: it creates a probe object, creates it again (which
// must fail with ErrPreconditionFailed), and deletes it. Datanodes and
// metasrv run it at start.
func CheckConditionalCreate(ctx context.Context, b Bucket, endpoint string) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	key := ProbePrefix + "conditional-create-" + hex.EncodeToString(rnd[:])
	if err := b.CreateIfAbsent(ctx, key, []byte("first")); err != nil {
		return fmt.Errorf("objstore: probe of %s: create %s: %w", endpoint, key, err)
	}
	defer func() { _ = b.Delete(context.WithoutCancel(ctx), key) }()
	err := b.CreateIfAbsent(ctx, key, []byte("second"))
	switch {
	case err == nil:
		return fmt.Errorf("%w: %s let a second create of %s succeed; use a store with conditional writes (AWS S3, MinIO, or file://)", ErrNoConditionalCreate, endpoint, key)
	case errors.Is(err, ErrPreconditionFailed):
		return nil
	default:
		return fmt.Errorf("objstore: probe of %s: second create of %s: %w", endpoint, key, err)
	}
}
