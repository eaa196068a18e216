package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"
	gcaws "gocloud.dev/aws"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"
)

// openS3 opens s3://bucket?endpoint=...&use_path_style=true&region=...
// (other parameters as gocloud.dev/aws documents). The SDK's own retries
// are off so that the Store's retry policy is the only one and its request
// counts are real; the SDK's debug log is silenced.
func openS3(ctx context.Context, u *url.URL) (*cloudBucket, error) {
	client, cfg, err := s3Client(ctx, u)
	if err != nil {
		return nil, err
	}
	b, err := s3blob.OpenBucket(ctx, client, u.Host, &s3blob.Options{RequestChecksumCalculation: cfg.RequestChecksumCalculation})
	if err != nil {
		return nil, err
	}
	return &cloudBucket{b: b, s3: client, bucket: u.Host}, nil
}

func s3Client(ctx context.Context, u *url.URL) (*s3.Client, aws.Config, error) {
	q := u.Query()
	pathStyle := q.Get("use_path_style") == "true"
	q.Del("use_path_style")
	cfg, err := gcaws.V2ConfigFromURLParams(ctx, q)
	if err != nil {
		return nil, cfg, err
	}
	cfg.Logger = logging.Nop{}
	cfg.Retryer = func() aws.Retryer { return aws.NopRetryer{} }
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UsePathStyle = pathStyle
		// Bodies are not hashed into the signature (UNSIGNED-PAYLOAD): each
		// upload carries a CRC32 checksum that the store verifies, and TLS
		// protects https:// endpoints. Over plain http, signing the body
		// would only guard writes against tampering while reads stay
		// unprotected; it cost a SHA-256 of every byte on both ends
		// (docs/design-decisions.md, "S3 bodies are unsigned payloads with a
		// checksum").
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Finalize.Add(unsignedPayload, middleware.Before)
		})
	})
	return client, cfg, nil
}

// CreateBucket creates the bucket (s3://) or directory (file://) a store
// URL names, if it does not exist yet: `strata store init`, run once
// before the first datanode starts.
func CreateBucket(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("objstore: parse store URL: %w", err)
	}
	if u.Scheme != "s3" {
		b, err := OpenBackend(ctx, rawURL) // file:// creates its directory
		if err != nil {
			return err
		}
		return b.Close()
	}
	client, _, err := s3Client(ctx, u)
	if err != nil {
		return fmt.Errorf("objstore: open %q: %w", rawURL, err)
	}
	if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(u.Host)}); err == nil {
		return nil
	}
	_, err = client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(u.Host)})
	var owned *s3types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("objstore: create bucket %s: %w", u.Host, err)
	}
	return nil
}

// unsignedPayload marks a request's body as not part of its signature.
//
// NB: it must come before the SDK's checksum step, which (over plain
// http) otherwise hashes the body with SHA-256 for the signature while it
// computes the CRC32; with the hash already set, it computes the CRC32
// alone.
var unsignedPayload = middleware.FinalizeMiddlewareFunc("StrataUnsignedPayload",
	func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		return next.HandleFinalize(v4.SetPayloadHash(ctx, "UNSIGNED-PAYLOAD"), in)
	})

// cloudBucket is a Bucket over a gocloud.dev/blob bucket. For file:// it
// stages Put and CreateIfAbsent itself (see fileWriter), because fileblob
// neither fsyncs nor makes IfNotExist atomic across processes.
type cloudBucket struct {
	b    *blob.Bucket
	file *fileWriter // non-nil for file://
	// For s3://, whole objects are written with PutObject itself: the
	// blob writer pipes them through the transfer manager, which reads
	// each body back with io.ReadAll, growing a copy of it (7% of a
	// standalone's CPU under ingest on MinIO). Keys need no escaping
	// (ValidateKey allows none of what s3blob escapes).
	s3     *s3.Client
	bucket string
}

// OpenBackend opens the raw backend named by rawURL, without retries or
// request counting. Most callers want Open.
//
//	file:///abs/dir            a local directory (created if absent)
//	s3://bucket?endpoint=http://127.0.0.1:9000&use_path_style=true&region=us-east-1
//	mem://                     an in-process bucket, for tests
func OpenBackend(ctx context.Context, rawURL string) (Bucket, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("objstore: parse store URL: %w", err)
	}
	switch u.Scheme {
	case "mem":
		return &cloudBucket{b: memblob.OpenBucket(nil)}, nil
	case "file":
		dir := filepath.Clean(u.Path)
		if !filepath.IsAbs(dir) || u.Host != "" {
			return nil, fmt.Errorf("objstore: file URL %q must be file:///absolute/path", rawURL)
		}
		if err := os.MkdirAll(filepath.Join(dir, tmpDir), 0o755); err != nil {
			return nil, fmt.Errorf("objstore: create store dir: %w", err)
		}
		removeStaleStaging(filepath.Join(dir, tmpDir), time.Hour)
		b, err := fileblob.OpenBucket(dir, &fileblob.Options{Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
		if err != nil {
			return nil, fmt.Errorf("objstore: open %q: %w", rawURL, err)
		}
		return &cloudBucket{b: b, file: &fileWriter{dir: dir}}, nil
	case "s3":
		b, err := openS3(ctx, u)
		if err != nil {
			return nil, fmt.Errorf("objstore: open %q: %w", rawURL, err)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("objstore: unsupported store URL scheme %q (want file, s3 or mem)", u.Scheme)
	}
}

// s3Error gives an error of the S3 client the code s3blob would (its
// ErrorCode), so that classify sees the same errors either way.
func s3Error(err error) error {
	if err == nil {
		return nil
	}
	var ae smithy.APIError
	var re *awshttp.ResponseError
	code := gcerrors.Unknown
	switch {
	case errors.As(err, &ae):
		switch ae.ErrorCode() {
		case "NoSuchBucket", "NoSuchKey", "NotFound":
			code = gcerrors.NotFound
		case "PreconditionFailed":
			code = gcerrors.FailedPrecondition
		case "AccessDenied", "Forbidden":
			code = gcerrors.PermissionDenied
		}
	case errors.As(err, &re):
		switch re.HTTPStatusCode() {
		case http.StatusNotFound, http.StatusMovedPermanently:
			code = gcerrors.NotFound
		case http.StatusUnauthorized, http.StatusForbidden:
			code = gcerrors.PermissionDenied
		}
	}
	if code == gcerrors.Unknown {
		return err
	}
	return &s3CodedError{code: code, err: err}
}

type s3CodedError struct {
	code gcerrors.ErrorCode
	err  error
}

func (e *s3CodedError) Error() string { return e.err.Error() }
func (e *s3CodedError) Unwrap() error { return e.err }

// classify wraps a backend error into an *OpError with its sentinel.
func classify(op Op, key string, err error) error {
	if err == nil {
		return nil
	}
	var oe *OpError
	if errors.As(err, &oe) {
		return err
	}
	e := &OpError{Op: op, Key: key, Cause: err}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller's context ended: permanent for this call.
	case errors.Is(err, os.ErrNotExist):
		e.Kind = ErrNotFound
	case errors.Is(err, os.ErrExist):
		e.Kind = ErrPreconditionFailed
	default:
		code := gcerrors.Code(err)
		var se *s3CodedError
		if errors.As(err, &se) {
			code = se.code
		}
		switch code {
		case gcerrors.NotFound:
			e.Kind = ErrNotFound
		case gcerrors.FailedPrecondition, gcerrors.AlreadyExists:
			e.Kind = ErrPreconditionFailed
		case gcerrors.InvalidArgument, gcerrors.PermissionDenied, gcerrors.Unimplemented, gcerrors.Canceled:
			// permanent
		default:
			// Unavailable, ResourceExhausted, Internal, DeadlineExceeded of
			// a request, and Unknown (connection refused, resets): retry.
			e.Kind = ErrTransient
		}
	}
	return e
}

func (c *cloudBucket) Get(ctx context.Context, key string) ([]byte, error) {
	data, err := c.b.ReadAll(ctx, key)
	return data, classify(OpGet, key, err)
}

func (c *cloudBucket) GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	r, err := c.b.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, classify(OpGet, key, err)
	}
	defer r.Close()
	// NB: read straight into the result. The reader's WriteTo would copy
	// every byte once more, through its own buffer.
	n := r.Size() - offset // length < 0: to the end
	if length >= 0 {
		n = min(n, length)
	}
	buf := make([]byte, max(0, n))
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, classify(OpGet, key, err)
	}
	return buf, nil
}

func (c *cloudBucket) ReadRange(ctx context.Context, key string, offset int64, buf []byte) (int, error) {
	r, err := c.b.NewRangeReader(ctx, key, offset, int64(len(buf)), nil)
	if err != nil {
		return 0, classify(OpGet, key, err)
	}
	defer r.Close()
	n, err := io.ReadFull(r, buf[:max(0, min(int64(len(buf)), r.Size()-offset))])
	if err != nil {
		return 0, classify(OpGet, key, err)
	}
	return n, nil
}

func (c *cloudBucket) Put(ctx context.Context, key string, data []byte) error {
	if c.file != nil {
		return classify(OpPut, key, c.file.write(key, data, false))
	}
	return classify(OpPut, key, c.writeAll(ctx, key, data, &blob.WriterOptions{}))
}

func (c *cloudBucket) CreateIfAbsent(ctx context.Context, key string, data []byte) error {
	if c.file != nil {
		return classify(OpPut, key, c.file.write(key, data, true))
	}
	return classify(OpPut, key, c.writeAll(ctx, key, data, &blob.WriterOptions{IfNotExist: true}))
}

// writeAll writes data as one object. Unlike blob.Bucket.WriteAll, it sends
// no Content-MD5: WriteAll hashed every byte twice (once for the header,
// once to check what it wrote) for an integrity check that the upload's
// CRC32 checksum already gives (s3Client), 4% of a standalone's CPU
// under ingest on MinIO.
func (c *cloudBucket) writeAll(ctx context.Context, key string, data []byte, opts *blob.WriterOptions) error {
	if c.s3 != nil {
		in := &s3.PutObjectInput{Bucket: aws.String(c.bucket), Key: aws.String(key), Body: bytes.NewReader(data),
			ContentLength: aws.Int64(int64(len(data))), ContentType: aws.String("application/octet-stream")}
		if opts.IfNotExist {
			in.IfNoneMatch = aws.String("*") // a conditional create
		}
		_, err := c.s3.PutObject(ctx, in)
		return s3Error(err)
	}
	// NB: closing a blob writer commits what was written; cancelling its
	// context first aborts it.
	wctx, abort := context.WithCancel(ctx)
	defer abort()
	opts.ContentType = "application/octet-stream" // no sniffing
	w, err := c.b.NewWriter(wctx, key, opts)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		abort()
		_ = w.Close() // aborted: the write's error is the one returned
		return err
	}
	return w.Close()
}

func (c *cloudBucket) Delete(ctx context.Context, key string) error {
	var err error
	switch {
	case c.file != nil:
		// A plain remove: fileblob's Delete would also look for sidecars.
		err = os.Remove(c.file.path(key))
	case c.s3 != nil:
		// DeleteObject itself: s3blob's Delete sends a HEAD first, to
		// report a missing key, which a delete here treats as done (two
		// requests a delete, half of them for nothing).
		_, err = c.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(c.bucket), Key: aws.String(key)})
		err = s3Error(err)
	default:
		err = c.b.Delete(ctx, key)
	}
	err = classify(OpDelete, key, err)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

func (c *cloudBucket) List(ctx context.Context, prefix string, token []byte, pageSize int) (Page, error) {
	if pageSize <= 0 {
		pageSize = 1000
	}
	if len(token) == 0 {
		token = blob.FirstPageToken
	}
	objs, next, err := c.b.ListPage(ctx, token, pageSize, &blob.ListOptions{Prefix: prefix})
	if err != nil {
		return Page{}, classify(OpList, prefix, err)
	}
	p := Page{NextToken: next}
	for _, o := range objs {
		if o.IsDir || strings.HasPrefix(o.Key, tmpDir+"/") {
			continue
		}
		p.Objects = append(p.Objects, Object{Key: o.Key, Size: o.Size, ModTime: o.ModTime})
	}
	return p, nil
}

func (c *cloudBucket) Attributes(ctx context.Context, key string) (Attrs, error) {
	a, err := c.b.Attributes(ctx, key)
	if err != nil {
		return Attrs{}, classify(OpHead, key, err)
	}
	return Attrs{Size: a.Size, ModTime: a.ModTime}, nil
}

func (c *cloudBucket) Close() error { return c.b.Close() }

// removeStaleStaging deletes staged writes older than age: they belong to a
// process that crashed between staging and publishing (live writers publish
// or remove theirs within one call).
func removeStaleStaging(dir string, age time.Duration) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > age {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
