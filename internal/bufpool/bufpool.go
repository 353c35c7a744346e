// Package bufpool pools byte buffers by size class, so that the data path
// (a leader's reads for its followers and consumers, a Kafka connection's
// request frames, gRPC's encoded messages) reuses its buffers instead of
// allocating one per request: at hundreds of MB/s the garbage collector's
// work is most of the cost of a fresh buffer.
//
// Buffers go around as *[]byte, so that giving one back allocates nothing;
// Pool is the same pool as a value, with the method set of grpc-go's
// mem.BufferPool.
package bufpool

import (
	"math/bits"
	"sync"
)

// Size classes are powers of two from 1<<minShift to 1<<maxShift bytes;
// larger buffers are allocated and dropped, not pooled, so that one huge
// request does not pin its memory.
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

// Get returns a buffer of length n (its contents undefined), from the pool
// when a pooled class holds n. Give it back with Put once no slice of it is
// in use.
func Get(n int) *[]byte {
	c := class(n)
	if c < 0 {
		b := make([]byte, n)
		return &b
	}
	if b, ok := pools[c].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(c+minShift))
	return &b
}

// Put returns b to its pool; b must not be used after. A nil b, or one
// whose capacity is not a class (grown past it, or too large), is dropped.
func Put(b *[]byte) {
	if b == nil {
		return
	}
	c := cap(*b)
	if c < 1<<minShift || c > 1<<maxShift || c&(c-1) != 0 {
		return
	}
	*b = (*b)[:0]
	pools[bits.Len(uint(c))-1-minShift].Put(b)
}

// Pool is the package's pool as a value: grpc-go's mem.BufferPool, for
// mem.NewBuffer.
type Pool struct{}

// Get is Get.
func (Pool) Get(n int) *[]byte { return Get(n) }

// Put is Put.
func (Pool) Put(b *[]byte) { Put(b) }
