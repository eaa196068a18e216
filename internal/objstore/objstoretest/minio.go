// Package objstoretest holds test helpers for object stores: a MinIO server
// started on loopback, and the acceptance suite that every backend passes.
package objstoretest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// MinIO credentials used by the harness (loopback only).
const (
	minioUser     = "strata-test"
	minioPassword = "strata-test-secret"
)

// MinIOServer is a MinIO process started by the harness.
type MinIOServer struct {
	Endpoint string // http://127.0.0.1:port
	cmd      *exec.Cmd
	exited   chan error
	addr     string
	bin      string
	dir      string
	log      *os.File
	buckets  atomic.Int64
}

var (
	minioOnce sync.Once
	minioSrv  *MinIOServer
	minioErr  error
)

// MinIOBinary finds the MinIO binary: $STRATA_MINIO_BIN, then
// ~/.cache/strata/bin/minio, then $PATH. It returns "" if there is none.
func MinIOBinary() string {
	if p := os.Getenv("STRATA_MINIO_BIN"); p != "" {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "strata", "bin", "minio")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p
	}
	return ""
}

// MinIO returns the package's shared MinIO server, starting it on first use.
// Without a binary it skips the test, unless STRATA_REQUIRE_S3 is set, in
// which case it fails. Call StopMinIO from TestMain.
func MinIO(t testing.TB) *MinIOServer {
	t.Helper()
	minioOnce.Do(func() { minioSrv, minioErr = startMinIO() })
	if minioErr != nil {
		if os.Getenv("STRATA_REQUIRE_S3") != "" {
			t.Fatalf("MinIO required (STRATA_REQUIRE_S3 is set): %v", minioErr)
		}
		t.Skipf("skipping S3 backend: %v (install it with: GOBIN=~/.cache/strata/bin go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c)", minioErr)
	}
	return minioSrv
}

// StopMinIO stops the shared server if it was started.
func StopMinIO() {
	if minioSrv != nil {
		minioSrv.stop()
	}
}

func startMinIO() (*MinIOServer, error) {
	bin := MinIOBinary()
	if bin == "" {
		return nil, fmt.Errorf("no MinIO binary (set STRATA_MINIO_BIN or put minio on PATH)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	dir, err := os.MkdirTemp("", "strata-minio-")
	if err != nil {
		return nil, err
	}
	s := &MinIOServer{Endpoint: "http://" + addr, dir: dir, addr: addr, bin: bin}
	if err := s.run(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	// The AWS SDK in this process (and in helper processes) reads these.
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": minioUser, "AWS_SECRET_ACCESS_KEY": minioPassword, "AWS_REGION": "us-east-1"} {
		if err := os.Setenv(k, v); err != nil {
			s.stop()
			return nil, err
		}
	}
	return s, nil
}

// run starts the server process on s.addr over s.dir and waits until it
// is ready.
func (s *MinIOServer) run() error {
	logf, err := os.OpenFile(filepath.Join(s.dir, "minio.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "server", "--quiet", "--address", s.addr, "--console-address", "127.0.0.1:0", filepath.Join(s.dir, "data"))
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+minioUser, "MINIO_ROOT_PASSWORD="+minioPassword,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start MinIO: %w", err)
	}
	s.cmd, s.log = cmd, logf
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	s.exited = exited
	deadline := time.After(60 * time.Second)
	for {
		// /minio/health/ready can answer 200 before the object layer is
		// initialised (requests then fail with XMinioServerNotInitialized),
		// so the server is ready only once it lists buckets.
		if s.ready() {
			return nil
		}
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("MinIO exited: %v\n%s", err, out)
		case <-deadline:
			_ = cmd.Process.Kill()
			return fmt.Errorf("MinIO not ready after 60s")
		case <-time.After(50 * time.Millisecond): // polling an external process: no signal exists
		}
	}
}

// Restart kills the server (as a crash would) and starts it again on the
// same address and data, after down has run (nil: at once).
func (s *MinIOServer) Restart(t testing.TB, down func()) {
	t.Helper()
	_ = s.cmd.Process.Kill()
	t.Logf("MinIO killed: %v", <-s.exited)
	_ = s.log.Close()
	if down != nil {
		down()
	}
	if err := s.run(); err != nil {
		t.Fatalf("restart MinIO: %v", err)
	}
}

func (s *MinIOServer) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.log.Close()
	_ = os.RemoveAll(s.dir)
}

func (s *MinIOServer) client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		Region:       "us-east-1",
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(minioUser, minioPassword, ""),
	})
}

// ready reports whether the server answers health checks and serves
// requests.
func (s *MinIOServer) ready() bool {
	resp, err := http.Get(s.Endpoint + "/minio/health/ready")
	if err != nil {
		return false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = s.client().ListBuckets(ctx, &s3.ListBucketsInput{})
	return err == nil
}

// NewBucket creates a fresh bucket and returns its s3:// store URL.
func (s *MinIOServer) NewBucket(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("strata-%d-%d", time.Now().UnixNano()%1e9, s.buckets.Add(1))
	if _, err := s.client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	return s.URL(name)
}

// URL is the store URL of an existing bucket.
func (s *MinIOServer) URL(bucket string) string {
	return "s3://" + bucket + "?endpoint=" + strings.ReplaceAll(s.Endpoint, ":", "%3A") + "&use_path_style=true&region=us-east-1"
}
