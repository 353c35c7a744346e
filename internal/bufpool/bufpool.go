// Package bufpool pools byte buffers by size class, so that the data path
// (a leader's reads for its followers and consumers, a Kafka connection's
// request frames) reuses its buffers instead of allocating one per request:
// at hundreds of MB/s the garbage collector's work is most of the cost of a
// fresh buffer.
package bufpool

import (
	"math/bits"
	"sync"
)

// Size classes are powers of two from minClass to maxClass; larger buffers
// are allocated and dropped, not pooled, so that one huge request does not
// pin its memory.
const (
	minShift = 12 // 4 KiB
	maxShift = 24 // 16 MiB
)

var pools [maxShift - minShift + 1]sync.Pool

// class is the index of the smallest class holding n bytes, or -1 past the
// largest.
func class(n int) int {
	if n <= 1<<minShift {
		return 0
	}
	s := bits.Len(uint(n - 1))
	if s > maxShift {
		return -1
	}
	return s - minShift
}

// Buf is a pooled buffer: B is its bytes. Hold the Buf, not only B, until
// Put, so that giving it back allocates nothing.
type Buf struct{ B []byte }

// Get returns a buffer whose B has length n (its contents undefined), from
// the pool when a pooled class holds n. Give it back with Put when done
// with every slice of B.
func Get(n int) *Buf {
	c := class(n)
	if c < 0 {
		return &Buf{B: make([]byte, n)}
	}
	if b, ok := pools[c].Get().(*Buf); ok {
		b.B = b.B[:n]
		return b
	}
	return &Buf{B: make([]byte, n, 1<<(c+minShift))}
}

// Put returns b to its pool; b must not be used after. A nil b, or one
// whose B's capacity is not a class (grown past it, or too large), is
// dropped.
func Put(b *Buf) {
	if b == nil {
		return
	}
	c := cap(b.B)
	if c < 1<<minShift || c > 1<<maxShift || c&(c-1) != 0 {
		return
	}
	b.B = b.B[:0]
	pools[bits.Len(uint(c))-1-minShift].Put(b)
}
