package prom

// RenderBits prints a result exactly: every value's bits.
var RenderBits = renderBits

// KeptBodyLen is how many strings respond's kept body lists.
func KeptBodyLen() int {
	keptBody.Lock()
	defer keptBody.Unlock()
	return len(keptBody.vs)
}
