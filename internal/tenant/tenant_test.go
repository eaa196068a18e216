package tenant

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{"a", "team-1", "A.b_c", "x!*'()", strings.Repeat("z", 150), Default} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a|b", "a b", "ü", strings.Repeat("z", 151), "a\x00"} {
		if err := Check(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Check(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", []string{Default}},
		{"  ", []string{Default}},
		{"a", []string{"a"}},
		{"b|a|b", []string{"a", "b"}},
	} {
		got, err := Parse(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"a|", "|", "a||b", "a/b", ".."} {
		if _, err := Parse(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if got, err := One("a"); err != nil || got != "a" {
		t.Errorf("One(a) = %q, %v", got, err)
	}
	if got, err := One(""); err != nil || got != Default {
		t.Errorf("One() = %q, %v", got, err)
	}
	if _, err := One("a|b"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "only reads may be federated") {
		t.Errorf("One(a|b) = %v", err)
	}
	if _, err := One("a/b"); !errors.Is(err, ErrInvalid) {
		t.Errorf("One(a/b) = %v", err)
	}
}

func TestQualify(t *testing.T) {
	for _, c := range []struct{ tenant, table, want string }{
		{Default, "cpu", "cpu"},
		{"", "cpu", "cpu"},
		{Default, "__metrics", "__metrics"},
		{"a", "cpu", "__t/a/cpu"},
		{"a", "__metrics", "__t/a/__metrics"},
		{"a", "x/y", "__t/a/x/y"},
		// A default tenant's name that looks qualified names no other
		// tenant's table.
		{Default, "__t/b/cpu", "__t/default/__t/b/cpu"},
		{"a", "__t/b/cpu", "__t/a/__t/b/cpu"},
	} {
		got := Qualify(c.tenant, c.table)
		if got != c.want {
			t.Errorf("Qualify(%q, %q) = %q, want %q", c.tenant, c.table, got, c.want)
		}
		tn, tb := Split(got)
		want := c.tenant
		if want == "" {
			want = Default
		}
		if tn != want || tb != c.table {
			t.Errorf("Split(%q) = %q, %q; want %q, %q", got, tn, tb, want, c.table)
		}
		if Of(got) != want || Base(got) != c.table {
			t.Errorf("Of, Base(%q) = %q, %q", got, Of(got), Base(got))
		}
	}
	if got := Unqualify("a", "table not found: __t/a/cpu (not __t/b/cpu)"); got != "table not found: cpu (not __t/b/cpu)" {
		t.Errorf("Unqualify: %q", got)
	}
	if got := Unqualify(Default, "__t/a/cpu"); got != "__t/a/cpu" {
		t.Errorf("Unqualify of the default tenant's: %q", got)
	}
	if Qualify("a", "cpu") == Qualify("b", "cpu") || Qualify("a", "cpu") == Qualify(Default, "cpu") {
		t.Error("two tenants' cpu are one name")
	}
}
