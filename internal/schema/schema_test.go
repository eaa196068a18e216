package schema

import (
	"errors"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/row"
)

func TestExtendAndReload(t *testing.T) {
	s, err := New("ts")
	if err != nil {
		t.Fatal(err)
	}
	add := s.Extend()
	for _, err := range []error{add.Tag("host"), add.Field("cpu", row.Float), add.Field("cpu", row.Float), add.Tag("host"), add.Field("n", row.Uint)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	next, err := add.Result()
	if err != nil {
		t.Fatal(err)
	}
	if next.Version() != s.Version()+1 || next.Timestamp() != "ts" || len(next.Tags()) != 1 || len(next.Fields()) != 2 {
		t.Fatalf("extended: v%d tags %v fields %v", next.Version(), next.Tags(), next.Fields())
	}
	if o, ok := next.FieldOrdinal("n"); !ok || o != 1 {
		t.Fatalf("ordinal of n: %d %v", o, ok)
	}
	re, err := FromManifest(next.Manifest())
	if err != nil || re.Version() != next.Version() || len(re.Fields()) != 2 || re.Fields()[0] != (Field{Name: "cpu", Kind: row.Float}) {
		t.Fatalf("reloaded: %v %v", re, err)
	}
	if same, _ := re.Extend().Result(); same != re {
		t.Fatal("no additions must return the same schema")
	}
}

func TestConflictsNameColumnAndBothTypes(t *testing.T) {
	s, _ := New(DefaultTimestamp)
	add := s.Extend()
	if err := add.Field("cpu", row.Float); err != nil {
		t.Fatal(err)
	}
	s, _ = add.Result()
	for _, c := range []struct {
		err  error
		want string
	}{
		{s.Extend().Field("cpu", row.Int), `column "cpu" is field float64 in the schema but is written as field int64`},
		{s.Extend().Tag("cpu"), `column "cpu" is field float64 in the schema but is written as tag string`},
		{s.Extend().Field("time", row.Int), `column "time" is timestamp int64`},
	} {
		var ce *ConflictError
		if !errors.As(c.err, &ce) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("got %v, want %q", c.err, c.want)
		}
	}
	a := s.Extend()
	if err := a.Field("x", row.Bool); err != nil {
		t.Fatal(err)
	}
	if err := a.Field("x", row.String); err == nil || !strings.Contains(err.Error(), "bool") {
		t.Errorf("conflict within one batch: %v", err)
	}
}

func TestBadNames(t *testing.T) {
	for _, n := range []string{"", "__x", "a\x00", "a\tb", strings.Repeat("n", MaxNameLen+1), "\xff"} {
		if err := ValidateName(n); !errors.Is(err, ErrBadName) {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range []string{"cpu", "usage_user", "温度", "a b", "_x"} {
		if err := ValidateName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	if _, err := FromManifest(Persisted{Version: 1, Columns: []Column{{Name: "a", Role: "field", Type: "complex"}}}); err == nil {
		t.Error("unknown type accepted")
	}
	if _, err := FromManifest(Persisted{Version: 1, Columns: []Column{{Name: "a", Role: "field", Type: "bool"}}}); err == nil {
		t.Error("schema without a timestamp accepted")
	}
}
