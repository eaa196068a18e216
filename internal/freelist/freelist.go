// Package freelist keeps a bounded number of reusable values.
//
// A sync.Pool empties over two garbage collections. The write path's
// buffers are megabytes each (a request body, its parser's arenas, its WAL
// encoding) and a busy node collects several times a second, so a pooled
// buffer was often gone by the next request and allocated again: fresh
// memory, zeroed and faulted in, about a tenth of the CPU of a write. A
// List keeps up to its bound for as long as the process runs; what it holds
// is bounded by count, and callers bound each value's size.
package freelist

// List holds up to a fixed number of values of T. It is safe for
// concurrent use.
type List[T any] struct {
	ch chan T
}

// New returns a list that keeps at most n values.
func New[T any](n int) *List[T] {
	return &List[T]{ch: make(chan T, n)}
}

// Get returns a kept value, or ok false if there is none.
func (l *List[T]) Get() (v T, ok bool) {
	select {
	case v = <-l.ch:
		return v, true
	default:
		return v, false
	}
}

// Put keeps v if the list has room, and reports whether it did.
func (l *List[T]) Put(v T) bool {
	select {
	case l.ch <- v:
		return true
	default:
		return false
	}
}
