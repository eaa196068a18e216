package freelist

import (
	"runtime"
	"testing"
)

func TestListKeepsUpToItsBoundAcrossCollections(t *testing.T) {
	l := New[*[]byte](2)
	if _, ok := l.Get(); ok {
		t.Fatal("an empty list returned a value")
	}
	a, b, c := new([]byte), new([]byte), new([]byte)
	if !l.Put(a) || !l.Put(b) {
		t.Fatal("a list with room refused a value")
	}
	if l.Put(c) {
		t.Fatal("a full list kept a third value")
	}
	runtime.GC()
	runtime.GC() // a sync.Pool would be empty now
	got := map[*[]byte]bool{}
	for range 2 {
		v, ok := l.Get()
		if !ok {
			t.Fatal("a kept value did not survive collections")
		}
		got[v] = true
	}
	if !got[a] || !got[b] {
		t.Fatalf("got %v, want the two values put", got)
	}
	if _, ok := l.Get(); ok {
		t.Fatal("the list returned more than it kept")
	}
}
