package rpc

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

// TestBufferPool_AtMostTwiceTheMessage: a 40 KiB message takes a 64 KiB
// buffer (gRPC's default pool handed out, and zeroed, 1 MiB).
func TestBufferPool_AtMostTwiceTheMessage(t *testing.T) {
	for _, size := range []int{300, 40 << 10, 370 << 10, 3 << 20} {
		buf := bufferPool.Get(size)
		if len(*buf) != size || cap(*buf) > 2*size {
			t.Errorf("Get(%d): len %d, cap %d; want len %d, cap at most %d", size, len(*buf), cap(*buf), size, 2*size)
		}
		bufferPool.Put(buf)
	}
}

// TestPooledCodec_RoundTrip: what pooledCodec encodes it decodes back, from
// one buffer and from the frame-sized pieces gRPC reads a large message in.
func TestPooledCodec_RoundTrip(t *testing.T) {
	for _, size := range []int{10, 40 << 10, 370 << 10} {
		want := &keelpb.MetadataEntry{PrevOffset: 6, Offset: 7, Term: 2, Data: bytes.Repeat([]byte{0xab}, size)}
		enc, err := pooledCodec{}.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		b := enc.Materialize()
		enc.Free()
		var pieces mem.BufferSlice
		for rest := b; len(rest) > 0; {
			n := min(len(rest), 16<<10)
			pieces = append(pieces, mem.SliceBuffer(rest[:n]))
			rest = rest[n:]
		}
		for _, in := range []mem.BufferSlice{{mem.SliceBuffer(b)}, pieces} {
			got := &keelpb.MetadataEntry{}
			if err := (pooledCodec{}).Unmarshal(in, got); err != nil {
				t.Fatalf("%d bytes in %d buffers: %v", size, len(in), err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("%d bytes in %d buffers: decoded a different message", size, len(in))
			}
		}
	}
}
