package rpc

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// bufferPool is the pool gRPC reads messages into, and Keel's codec
// (pooledCodec) encodes and decodes them with, in every server and client
// Keel makes: one tier per power of two from 256 B to 16 MiB, so a buffer
// is at most twice the message it holds. gRPC's default pool has tiers at
// 256 B, 4, 16 and 32 KiB and 1 MiB only, and clears a buffer's whole
// capacity each time it hands it out: every follower fetch answer or
// metadata push between 32 KiB and 1 MiB took, and zeroed, a 1 MiB buffer,
// twice (decoding it, and encoding it on the other side). That was 14 % of
// a broker's CPU under an acks=all load (runtime.memclrNoHeapPointers under
// sizedBufferPool.Get).
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

// PooledDialOptions give a client Keel's buffer pool and codec
// (bufferPool), and its windows and write buffer (streamWindow); the
// clients this package builds have them already.
func PooledDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		experimental.WithBufferPool(bufferPool),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(pooledCodec{})),
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithWriteBufferSize(writeBufferBytes),
	}
}

// pooledCodec is gRPC's proto codec with bufferPool instead of gRPC's
// default pool (which its own codec always uses, whatever pool the
// connection was given).
type pooledCodec struct{}

var _ encoding.CodecV2 = pooledCodec{}

func (pooledCodec) Name() string { return grpcproto.Name }

func (pooledCodec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(WireMarshaler); ok {
		return w.MarshalWire()
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("cannot encode %T: not a protobuf message", v)
	}
	// UseCachedSize below reuses this Size, as gRPC's codec does.
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := bufferPool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		bufferPool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, bufferPool)}, nil
}

func (pooledCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if w, ok := v.(WireUnmarshaler); ok {
		return w.UnmarshalWire(data)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("cannot decode into %T: not a protobuf message", v)
	}
	return withBytes(data, func(b []byte) error { return proto.Unmarshal(b, m) })
}

// withBytes calls f with data's bytes in one slice, valid only during the
// call: data's own when it is one buffer, else a copy from bufferPool.
// (proto.Unmarshal copies what it keeps.)
func withBytes(data mem.BufferSlice, f func([]byte) error) error {
	if len(data) == 1 {
		return f(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(bufferPool)
	defer buf.Free()
	return f(buf.ReadOnlyData())
}

// Flow control and write buffering of every Keel connection. gRPC's
// defaults (64 KiB windows that its BDP estimator grows only after some
// round trips, and a 32 KiB write buffer) cut a 400 KB metadata push or a
// multi-MB fetch answer into many window waits and write syscalls: on the
// active controller, writing one push to each of 100 brokers was a third
// of its CPU during a million partitions' creation. Fixed windows of a
// fetch answer's order (the answer budget is 10 MiB by default) and a
// larger write buffer took 12 % off the controllers' CPU there and 11 %
// off the brokers' CPU per GB acknowledged (keel bench, 2026-12-06). The
// windows bound what a peer may send ahead, not what is allocated.
const (
	streamWindow     = 4 << 20
	connWindow       = 16 << 20
	writeBufferBytes = 256 << 10
)
