// Package addrmemo finds, within one pass over a batch, what was noted
// for a key seen earlier in the pass, by the address and length of its
// bytes. The rows of a series in a write share one key (the line-protocol
// parser keeps the key of each tag set it saw, memtable.ShareKeys one
// string for equal keys), so a key repeated in a batch is found for the
// cost of a multiplication and a compare, not a hash of its bytes and a
// comparison with what a map holds.
//
// While a pass runs, the bytes at an address are the caller's and do not
// change, so an address and a length name one key. A slot holds the
// address as a number, not a pointer (no batch's memory is kept alive), and
// the pass it was set in: a slot of an earlier pass, whose address may now
// hold other bytes, is never current. A key whose slot another took is
// not found, and the caller finds it the long way.
package addrmemo

import "unsafe"

const (
	bits = 12
	size = 1 << bits
)

// A Memo holds 4,096 slots (96 KiB).
type Memo struct {
	stamp uint32 // the pass: slots holding another are stale
	slots [size]Slot
}

// A Slot is where a key's value is noted.
type Slot struct {
	p     uintptr
	n     int
	stamp uint32
	v     uint32
}

// Begin starts a pass: nothing noted before it is found in it.
func (m *Memo) Begin() {
	m.stamp++
	if m.stamp == 0 { // wrapped: a slot may hold any stamp but 0
		clear(m.slots[:])
		m.stamp = 1
	}
}

// Find returns the value noted in this pass for the n bytes at p, if any,
// and the slot to note it in otherwise.
func (m *Memo) Find(p *byte, n int) (*Slot, uint32, bool) {
	a := uintptr(unsafe.Pointer(p))
	s := &m.slots[uint64(a)*0x9e3779b97f4a7c15>>(64-bits)]
	if s.stamp == m.stamp && s.p == a && s.n == n && a != 0 {
		return s, s.v, true
	}
	return s, 0, false
}

// Note notes v for the n bytes at p in this pass, in the slot Find gave.
func (m *Memo) Note(s *Slot, p *byte, n int, v uint32) {
	*s = Slot{p: uintptr(unsafe.Pointer(p)), n: n, stamp: m.stamp, v: v}
}
