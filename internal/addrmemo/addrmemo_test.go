package addrmemo

import (
	"math"
	"testing"
	"unsafe"
)

func TestFindsWhatThePassNoted(t *testing.T) {
	buf := []byte("cpu,host=a,rack=r1")
	p := unsafe.SliceData(buf)
	m := new(Memo)
	m.Begin()
	s, _, ok := m.Find(p, len(buf))
	if ok {
		t.Fatal("found a key before it was noted")
	}
	m.Note(s, p, len(buf), 7)
	if _, v, ok := m.Find(p, len(buf)); !ok || v != 7 {
		t.Fatalf("Find = %d, %v; want 7, true", v, ok)
	}
	if _, _, ok := m.Find(p, len(buf)-3); ok {
		t.Fatal("found a shorter key at the same address")
	}
	if _, _, ok := m.Find(nil, 0); ok {
		t.Fatal("found the empty key")
	}
	m.Begin() // the next pass: the bytes at p may be another key now
	if _, _, ok := m.Find(p, len(buf)); ok {
		t.Fatal("found a key noted in an earlier pass")
	}
}

// A stamp that wraps clears the slots: one noted 2^32 passes ago, with
// the stamp the pass after the wrap gets, is not found.
func TestWrappedStampForgetsEverySlot(t *testing.T) {
	buf := []byte("cpu,host=b")
	p := unsafe.SliceData(buf)
	m := new(Memo)
	m.Begin() // stamp 1
	s, _, _ := m.Find(p, len(buf))
	m.Note(s, p, len(buf), 3)
	m.stamp = math.MaxUint32
	m.Begin() // wraps to 0: cleared, and 1 again
	if m.stamp != 1 {
		t.Fatalf("stamp %d after the wrap, want 1", m.stamp)
	}
	if _, _, ok := m.Find(p, len(buf)); ok {
		t.Fatal("found a key noted before the stamp wrapped")
	}
}
