package objstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// BatchDeleter is implemented by buckets that delete many objects in one
// request (S3's DeleteObjects). On MinIO a key in a batch costs the
// server a fifth of the CPU a DELETE of its own does, and a datanode's
// collections delete WAL segments and SSTs by the hundred.
type BatchDeleter interface {
	// DeleteMany deletes keys; an absent key counts as deleted. It
	// returns the keys it did not delete and why (an *OpError each,
	// joined).
	DeleteMany(ctx context.Context, keys []string) (failed []string, err error)
}

// MaxDeleteBatch is the most keys one request deletes (S3's limit).
const MaxDeleteBatch = 1000

// DeleteMany deletes keys with as few requests as b allows: batches where
// b is a BatchDeleter, else one Delete a key. An absent key counts as
// deleted. The order in which keys go is not promised. It returns the
// keys it did not delete and why.
func DeleteMany(ctx context.Context, b Bucket, keys []string) ([]string, error) {
	if bd, ok := b.(BatchDeleter); ok {
		return bd.DeleteMany(ctx, keys)
	}
	return deleteEach(ctx, b, keys)
}

func deleteEach(ctx context.Context, b Bucket, keys []string) ([]string, error) {
	var failed []string
	var errs []error
	for _, k := range keys {
		if err := b.Delete(ctx, k); err != nil && !errors.Is(err, ErrNotFound) {
			failed, errs = append(failed, k), append(errs, err)
		}
	}
	return failed, errors.Join(errs...)
}

// DeleteMany sends batches of at most MaxDeleteBatch keys, each a request
// retried (its failed keys only) as Delete is; without batches from the
// backend, one Delete a key.
func (s *Store) DeleteMany(ctx context.Context, keys []string) ([]string, error) {
	bd, ok := s.inner.(BatchDeleter)
	if !ok {
		return deleteEach(ctx, s, keys)
	}
	return inBatches(keys, func(left []string) ([]string, error) {
		err := s.do(ctx, OpDelete, func() (e error) { left, e = bd.DeleteMany(ctx, left); return e })
		return left, err
	})
}

// inBatches calls del with keys, MaxDeleteBatch at a time, and gathers
// the keys it did not delete and why.
func inBatches(keys []string, del func([]string) ([]string, error)) ([]string, error) {
	var failed []string
	var errs []error
	for len(keys) > 0 {
		batch := keys[:min(len(keys), MaxDeleteBatch)]
		keys = keys[len(batch):]
		if left, err := del(batch); err != nil {
			failed, errs = append(failed, left...), append(errs, err)
		}
	}
	return failed, errors.Join(errs...)
}

// DeleteMany deletes with DeleteObjects on s3:// (at most MaxDeleteBatch
// keys a request), with Delete a key otherwise.
func (c *cloudBucket) DeleteMany(ctx context.Context, keys []string) ([]string, error) {
	if c.s3 == nil {
		return deleteEach(ctx, c, keys)
	}
	return inBatches(keys, func(batch []string) ([]string, error) { return c.deleteObjects(ctx, batch) })
}

// deleteObjects sends one DeleteObjects request.
func (c *cloudBucket) deleteObjects(ctx context.Context, batch []string) ([]string, error) {
	ids := make([]s3types.ObjectIdentifier, len(batch))
	for i, k := range batch {
		ids[i] = s3types.ObjectIdentifier{Key: aws.String(k)}
	}
	out, err := c.s3.DeleteObjects(ctx, &s3.DeleteObjectsInput{
		Bucket: aws.String(c.bucket),
		Delete: &s3types.Delete{Objects: ids, Quiet: aws.Bool(true)},
	})
	if err != nil {
		// The request failed as a whole: none of its keys is known deleted.
		return batch, classify(OpDelete, batch[0], s3Error(err))
	}
	var failed []string
	var errs []error
	for _, e := range out.Errors {
		code := aws.ToString(e.Code)
		if code == "NoSuchKey" {
			continue
		}
		k := aws.ToString(e.Key)
		failed = append(failed, k)
		errs = append(errs, &OpError{Op: OpDelete, Key: k, Kind: batchErrorKind(code), Cause: fmt.Errorf("%s: %s", code, aws.ToString(e.Message))})
	}
	return failed, errors.Join(errs...)
}

// batchErrorKind classifies the error code of one key of a DeleteObjects
// answer: the server's own trouble is worth a retry, the rest is not.
func batchErrorKind(code string) error {
	switch code {
	case "InternalError", "SlowDown", "ServiceUnavailable", "RequestTimeout", "OperationAborted":
		return ErrTransient
	}
	return nil
}
