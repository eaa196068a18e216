package symtab

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/row"
	"github.com/stratadb/strata/internal/testseed"
)

// Refs rebuild their keys, compare as the keys do bytewise, and tell a
// key equal only to itself (not to another encoding of its tags).
func TestRefs(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	word := func() string {
		n := rng.IntN(4)
		if rng.IntN(8) == 0 {
			n = 100 + rng.IntN(200) // two-byte lengths
		}
		return strings.Repeat(string(rune('a'+rng.IntN(3))), n)
	}
	var tab Table
	type key struct {
		s    string
		refs []byte
	}
	var keys []key
	for range 500 {
		var tags []row.Tag
		for range rng.IntN(4) {
			tags = append(tags, row.Tag{Name: word(), Value: word()})
		}
		var k []byte
		for _, tg := range tags { // as EncodeSeries would, empty values too
			k = appendSeg(appendSeg(k, tg.Name), tg.Value)
		}
		dec, err := row.DecodeSeries(nil, string(k))
		if err != nil || !Canonical(dec, string(k)) {
			t.Fatalf("key %q: %v canonical %v", k, err, Canonical(dec, string(k)))
		}
		keys = append(keys, key{string(k), tab.AppendRefs(nil, dec)})
	}
	v := tab.View()
	var arena KeyArena
	for i, a := range keys {
		if got := arena.Key(v, a.refs); got != a.s {
			t.Fatalf("rebuilt %q, want %q", got, a.s)
		}
		if !v.Equal(a.refs, a.s) || v.Equal(a.refs, a.s+"x") || (len(a.s) > 0 && v.Equal(a.refs, a.s[:len(a.s)-1])) {
			t.Fatalf("Equal of %q", a.s)
		}
		if len(a.s) > 0 && a.s[0] < 0x80 {
			if long := string([]byte{a.s[0] | 0x80, 0}) + a.s[1:]; v.Equal(a.refs, long) {
				t.Fatalf("%q equals a longer encoding of it", a.s)
			}
		}
		b := keys[(i*7+3)%len(keys)]
		if got, want := v.Compare(a.refs, b.refs), strings.Compare(a.s, b.s); got != want {
			t.Fatalf("Compare(%q, %q) = %d, want %d", a.s, b.s, got, want)
		}
	}
	if tab.Size() <= 0 || tab.Len() == 0 {
		t.Fatalf("size %d, %d symbols", tab.Size(), tab.Len())
	}
}

func appendSeg(dst []byte, s string) []byte {
	for n := uint64(len(s)); ; n >>= 7 {
		if n < 0x80 {
			dst = append(dst, byte(n))
			break
		}
		dst = append(dst, byte(n)|0x80)
	}
	return append(dst, s...)
}
