package objstoretest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratadb/strata/internal/objstore"
)

// Backend describes a store under test.
type Backend struct {
	Name string
	// Open returns a fresh, empty store and its URL. The URL is "" for
	// stores that other processes cannot open (mem://).
	Open func(t *testing.T) (objstore.Bucket, string)
}

// RunAcceptance runs the acceptance suite against b. Every backend must pass
// it unchanged.
func RunAcceptance(t *testing.T, b Backend) {
	ctx := context.Background()
	t.Run("ConditionalCreateProbe", func(t *testing.T) {
		s, _ := b.Open(t)
		if err := objstore.CheckConditionalCreate(ctx, s, "backend under test"); err != nil {
			t.Fatal(err)
		}
		if objs, err := objstore.ListAll(ctx, s, objstore.ProbePrefix, 100); err != nil || len(objs) != 0 {
			t.Fatalf("the probe left %v (%v)", objs, err)
		}
	})
	t.Run("PutGet", func(t *testing.T) {
		s, _ := b.Open(t)
		if _, err := s.Get(ctx, "a/b/missing"); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("Get missing: want ErrNotFound, got %v", err)
		}
		if err := s.Put(ctx, "a/b/c", []byte("one")); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "a/b/c", []byte("two")); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, "a/b/c")
		if err != nil || string(got) != "two" {
			t.Fatalf("Get = %q, %v; want \"two\"", got, err)
		}
		if err := s.Put(ctx, "empty", nil); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, "empty"); err != nil || len(got) != 0 {
			t.Fatalf("Get empty = %q, %v", got, err)
		}
	})
	t.Run("Upload", func(t *testing.T) {
		s, _ := b.Open(t)
		data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
		if _, ok := s.(objstore.Uploader); !ok {
			t.Fatal("the bucket does not stream uploads")
		}
		for range 2 { // the second replaces the first
			if err := objstore.Upload(ctx, s, "up/big", bytes.NewReader(data), int64(len(data))); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Get(ctx, "up/big")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get after Upload: %d bytes, %v", len(got), err)
		}
		if err := objstore.Upload(ctx, s, "../bad", bytes.NewReader(nil), 0); err == nil {
			t.Fatal("bad key accepted")
		}
		// Size unknown: read to the source's EOF.
		if err := objstore.Upload(ctx, s, "up/unsized", bytes.NewReader(data), -1); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, "up/unsized"); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get after an unsized Upload: %d bytes, %v", len(got), err)
		}
		// A source that fails after 12 MiB (past a multipart part) writes
		// nothing, and leaves an older object of that key alone; the error
		// is the source's, not a retryable store error.
		if err := s.Put(ctx, "up/keep", []byte("old")); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"up/never", "up/keep"} {
			src := failingSource{data: bytes.Repeat([]byte("x"), 12<<20)}
			err := objstore.Upload(ctx, s, key, src, -1)
			if !errors.Is(err, errSource) || errors.Is(err, objstore.ErrTransient) {
				t.Fatalf("Upload from a failing source: %v", err)
			}
		}
		if _, err := s.Get(ctx, "up/never"); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("a failed Upload wrote an object: %v", err)
		}
		if got, err := s.Get(ctx, "up/keep"); err != nil || string(got) != "old" {
			t.Fatalf("a failed Upload replaced an object: %q, %v", got, err)
		}
	})
	t.Run("GetRange", func(t *testing.T) {
		s, _ := b.Open(t)
		if err := s.Put(ctx, "r", []byte("0123456789")); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			off, n int64
			want   string
		}{{0, 3, "012"}, {4, 2, "45"}, {7, -1, "789"}, {8, 100, "89"}, {0, 0, ""}} {
			got, err := s.GetRange(ctx, "r", c.off, c.n)
			if err != nil || string(got) != c.want {
				t.Errorf("GetRange(%d, %d) = %q, %v; want %q", c.off, c.n, got, err, c.want)
			}
		}
		if _, err := s.GetRange(ctx, "nope", 0, 1); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("GetRange missing: want ErrNotFound, got %v", err)
		}
	})
	t.Run("ReadRange", func(t *testing.T) {
		s, _ := b.Open(t)
		if err := s.Put(ctx, "r", []byte("0123456789")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		for _, c := range []struct {
			off  int64
			n    int
			want string
		}{{0, 3, "012"}, {4, 2, "45"}, {7, 3, "789"}, {8, 16, "89"}, {0, 0, ""}} {
			copy(buf, "################")
			n, err := s.ReadRange(ctx, "r", c.off, buf[:c.n])
			if err != nil || string(buf[:n]) != c.want || string(buf[n:]) != "################"[n:] {
				t.Errorf("ReadRange(%d, %d) = %q (buffer %q), %v; want %q", c.off, c.n, buf[:n], buf, err, c.want)
			}
		}
		if _, err := s.ReadRange(ctx, "nope", 0, buf); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("ReadRange missing: want ErrNotFound, got %v", err)
		}
	})
	t.Run("CreateIfAbsent", func(t *testing.T) {
		s, _ := b.Open(t)
		if err := s.CreateIfAbsent(ctx, "m/1.json", []byte("first")); err != nil {
			t.Fatal(err)
		}
		err := s.CreateIfAbsent(ctx, "m/1.json", []byte("second"))
		if !errors.Is(err, objstore.ErrPreconditionFailed) {
			t.Fatalf("second create: want ErrPreconditionFailed, got %v", err)
		}
		if got, _ := s.Get(ctx, "m/1.json"); string(got) != "first" {
			t.Fatalf("content after lost race = %q, want \"first\"", got)
		}
	})
	t.Run("DeleteIdempotent", func(t *testing.T) {
		s, _ := b.Open(t)
		if err := s.Delete(ctx, "never/was"); err != nil {
			t.Fatalf("Delete absent: %v", err)
		}
		if err := s.Put(ctx, "d", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "d"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "d"); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("Get after delete: want ErrNotFound, got %v", err)
		}
		// A deleted key can be created again.
		if err := s.CreateIfAbsent(ctx, "d", []byte("y")); err != nil {
			t.Fatalf("create after delete: %v", err)
		}
	})
	t.Run("DeleteMany", func(t *testing.T) {
		s, _ := b.Open(t)
		// More keys than a request takes, absent ones among them.
		n := objstore.MaxDeleteBatch + 3
		keys := make([]string, 0, n+2)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		sem := make(chan struct{}, 8)
		for i := range n {
			k := fmt.Sprintf("w/s/%06d", i)
			keys = append(keys, k)
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if err := s.Put(ctx, k, []byte("x")); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "w/kept", []byte("k")); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, "w/never/was", "w/s/never")
		var before objstore.RequestCounts
		st, counted := s.(*objstore.Store)
		if counted {
			before = st.Requests()
		}
		failed, err := objstore.DeleteMany(ctx, s, keys)
		if err != nil || len(failed) != 0 {
			t.Fatalf("DeleteMany: %d failed: %v", len(failed), err)
		}
		objs, err := objstore.ListAll(ctx, s, "w/", 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != 1 || objs[0].Key != "w/kept" {
			t.Fatalf("after DeleteMany %d objects are left (want only w/kept): %v", len(objs), objs[:min(len(objs), 3)])
		}
		if counted {
			if got := st.Requests().Sub(before)[objstore.OpDelete]; got != 2 {
				t.Fatalf("%d keys deleted with %d requests, want 2", len(keys), got)
			}
		}
	})
	t.Run("Attributes", func(t *testing.T) {
		s, _ := b.Open(t)
		before := time.Now().Add(-2 * time.Second)
		if err := s.Put(ctx, "x/y", []byte("12345")); err != nil {
			t.Fatal(err)
		}
		a, err := s.Attributes(ctx, "x/y")
		if err != nil {
			t.Fatal(err)
		}
		if a.Size != 5 || a.ModTime.Before(before) || a.ModTime.After(time.Now().Add(2*time.Second)) {
			t.Fatalf("Attributes = %+v", a)
		}
		if _, err := s.Attributes(ctx, "x/z"); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("Attributes missing: want ErrNotFound, got %v", err)
		}
	})
	t.Run("ListPaginated", func(t *testing.T) {
		s, _ := b.Open(t)
		var want []string
		for i := range 25 {
			k := fmt.Sprintf("7/3/sst/%04d.parquet", i)
			want = append(want, k)
			if err := s.Put(ctx, k, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Put(ctx, "7/30/sst/other", []byte("x")); err != nil {
			t.Fatal(err)
		}
		var got []string
		pages := 0
		var token []byte
		for {
			p, err := s.List(ctx, "7/3/", token, 7)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(p.Objects) > 7 {
				t.Fatalf("page of %d objects, page size 7", len(p.Objects))
			}
			for _, o := range p.Objects {
				got = append(got, o.Key)
				if o.Size != 1 {
					t.Errorf("%s: size %d, want 1", o.Key, o.Size)
				}
			}
			if len(p.NextToken) == 0 {
				break
			}
			token = p.NextToken
		}
		if pages != 4 {
			t.Errorf("pages = %d, want 4 (25 objects, page size 7)", pages)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("listed %v\nwant %v", got, want)
		}
	})
	t.Run("InvalidKey", func(t *testing.T) {
		s, _ := b.Open(t)
		for _, k := range []string{"", "/abs", "a//b", "a/../b", "a/./b", "sp ace", ".strata-tmp/x", "trailing/"} {
			if err := s.Put(ctx, k, nil); !errors.Is(err, objstore.ErrInvalidKey) {
				t.Errorf("Put(%q): want ErrInvalidKey, got %v", k, err)
			}
		}
	})
	t.Run("CreateRaceGoroutines", func(t *testing.T) {
		s, _ := b.Open(t)
		const writers, rounds = 16, 10
		for r := range rounds {
			key := fmt.Sprintf("race/%020d.json", r)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var winners []int
			start := make(chan struct{})
			for w := range writers {
				wg.Go(func() {
					<-start
					err := s.CreateIfAbsent(ctx, key, fmt.Appendf(nil, "writer-%d", w))
					switch {
					case err == nil:
						mu.Lock()
						winners = append(winners, w)
						mu.Unlock()
					case !errors.Is(err, objstore.ErrPreconditionFailed):
						t.Errorf("writer %d: unexpected error %v", w, err)
					}
				})
			}
			close(start)
			wg.Wait()
			if len(winners) != 1 {
				t.Fatalf("round %d: %d winners %v, want exactly 1", r, len(winners), winners)
			}
			got, _ := s.Get(ctx, key)
			if want := fmt.Sprintf("writer-%d", winners[0]); string(got) != want {
				t.Fatalf("round %d: content %q, winner wrote %q", r, got, want)
			}
		}
	})
	t.Run("CreateRaceProcesses", func(t *testing.T) {
		s, url := b.Open(t)
		if url == "" {
			t.Skipf("%s is in-process only", b.Name)
		}
		const keys = 40
		wins := map[string][]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for p := range 2 {
			wg.Go(func() {
				id := fmt.Sprintf("proc-%d", p)
				out, err := runHelper(url, id, keys)
				if err != nil {
					t.Errorf("helper %s: %v", id, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, k := range out {
					wins[k] = append(wins[k], id)
				}
			})
		}
		wg.Wait()
		for i := range keys {
			k := fmt.Sprintf("xrace/%020d.json", i)
			w := wins[k]
			if len(w) != 1 {
				t.Fatalf("%s: winners %v, want exactly one", k, w)
			}
			got, err := s.Get(ctx, k)
			if err != nil || string(got) != w[0] {
				t.Fatalf("%s: content %q (%v), winner %s", k, got, err, w[0])
			}
		}
	})
}

const helperEnv = "STRATA_OBJSTORE_RACE_HELPER"

// runHelper re-executes the test binary as a racing writer (see
// MaybeRunRaceHelper) and returns the keys it won.
func runHelper(url, id string, keys int) ([]string, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d", helperEnv, url, id, keys))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, stderr.String())
	}
	var won []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, ok := strings.CutPrefix(sc.Text(), "WON "); ok {
			won = append(won, k)
		}
	}
	sort.Strings(won)
	return won, nil
}

// MaybeRunRaceHelper must be called first in TestMain. In a helper process it
// races CreateIfAbsent on the shared keys, prints the keys it won and exits.
func MaybeRunRaceHelper() {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		return
	}
	parts := strings.Split(spec, "|")
	var n int
	if _, err := fmt.Sscan(parts[2], &n); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	ctx := context.Background()
	s, err := objstore.Open(ctx, parts[0], objstore.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	for i := range n {
		k := fmt.Sprintf("xrace/%020d.json", i)
		err := s.CreateIfAbsent(ctx, k, []byte(parts[1]))
		switch {
		case err == nil:
			fmt.Println("WON " + k)
		case errors.Is(err, objstore.ErrPreconditionFailed):
		default:
			fmt.Fprintln(os.Stderr, err)
			os.Exit(4)
		}
	}
	os.Exit(0)
}

var errSource = errors.New("objstoretest: source failed")

// failingSource serves data, then fails instead of reporting EOF.
type failingSource struct{ data []byte }

func (f failingSource) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(f.data)) {
		return 0, errSource
	}
	n := copy(p, f.data[off:])
	if n < len(p) {
		return n, errSource
	}
	return n, nil
}
