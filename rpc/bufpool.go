package rpc

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

// bufferPool is the pool gRPC reads messages into and encodes them in,
// for every server and client Keel makes: one tier per power of two from
// 256 B to 16 MiB, so a buffer is at most twice the message it holds.
// gRPC's default pool has tiers at 256 B, 4, 16 and 32 KiB and 1 MiB only,
// and clears a buffer's whole capacity each time it hands it out: every
// follower fetch answer or metadata push between 32 KiB and 1 MiB took,
// and zeroed, a 1 MiB buffer. That was 15 % of a broker's CPU under an
// acks=all load (runtime.memclrNoHeapPointers under sizedBufferPool.Get).
var bufferPool = func() mem.BufferPool {
	var exps []uint8
	for e := uint8(8); e <= 24; e++ {
		exps = append(exps, e)
	}
	p, err := mem.NewBinaryTieredBufferPool(exps...)
	if err != nil {
		panic(fmt.Sprintf("rpc: gRPC buffer pool: %v", err))
	}
	return p
}()

// WithBufferPool is the dial option that gives a client Keel's buffer pool
// (bufferPool); the clients this package builds have it already.
func WithBufferPool() grpc.DialOption { return experimental.WithBufferPool(bufferPool) }
