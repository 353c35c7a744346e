package rpc

import (
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The data path's messages skip the protobuf copies: a leader's fetch
// answer carries megabytes of record batches that it read into a pooled
// buffer, and a metadata push goes to every broker. Keel's codecs (every
// Keel client and server forces them) let such a message encode or decode
// itself. The bytes on the wire are still the protobuf encoding of the
// message type, so a peer that decodes them with proto interoperates.

// WireMarshaler is a message that encodes itself: Keel's codecs send the
// buffers MarshalWire returns as they are. Each buffer carries one reference
// for gRPC, which frees it once written (a buffer referenced from elsewhere,
// such as a log read, goes back to its pool only after that).
type WireMarshaler interface {
	MarshalWire() (mem.BufferSlice, error)
}

// WireUnmarshaler is an answer that decodes itself from its bytes (a client
// aliasing record bytes instead of copying them). data is freed when
// UnmarshalWire returns: to keep any of it, take a reference (data.Ref(),
// or data.MaterializeToBuffer) and free it when done.
type WireUnmarshaler interface {
	UnmarshalWire(data mem.BufferSlice) error
}

// PreEncoded is a protobuf message encoded once, to be sent on many streams
// (grpc.ServerStream.SendMsg) without encoding it again: a metadata push
// goes to every broker. It is safe for concurrent sends. Free drops the
// encoder's reference; call it once the last SendMsg has returned.
type PreEncoded struct {
	data mem.BufferSlice
}

var _ WireMarshaler = (*PreEncoded)(nil)

// Encode encodes m once, into Keel's buffer pool.
func Encode(m proto.Message) (*PreEncoded, error) {
	data, err := pooledCodec{}.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &PreEncoded{data: data}, nil
}

// MarshalWire returns the encoded bytes with a reference for the sender.
func (p *PreEncoded) MarshalWire() (mem.BufferSlice, error) {
	p.data.Ref()
	return p.data, nil
}

// Len is the encoded size in bytes.
func (p *PreEncoded) Len() int { return p.data.Len() }

// Free drops the encoder's reference: the buffer goes back to the pool once
// every send has written it.
func (p *PreEncoded) Free() { p.data.Free() }
