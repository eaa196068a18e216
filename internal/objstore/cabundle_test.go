package objstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/objstore"
)

// TestS3CABundle: the S3 client verifies servers against the system roots,
// or against the CA bundle AWS_CA_BUNDLE names (docs/configuration.md,
// "TLS"); a bundle that cannot be read fails the open, naming it.
func TestS3CABundle(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", "/no/such/ca.pem")
	t.Setenv("AWS_ACCESS_KEY_ID", "x")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "y")
	_, err := objstore.OpenBackend(context.Background(), "s3://b?endpoint=https://127.0.0.1:1&use_path_style=true&region=us-east-1")
	if err == nil || !strings.Contains(err.Error(), "/no/such/ca.pem") {
		t.Fatalf("open with an unreadable AWS_CA_BUNDLE: %v, want an error naming it", err)
	}
}
