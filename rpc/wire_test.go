package rpc

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

// A pre-encoded message goes out as the same bytes proto gives, once per
// send, and its buffer survives every send until the encoder frees it.
func TestPreEncoded_SendsProtoBytes(t *testing.T) {
	msg := &keelpb.FetchResponse{HighWatermark: 7, Records: bytes.Repeat([]byte{1}, 64<<10)}
	want, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Encode(msg)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != len(want) {
		t.Fatalf("Len %d, want %d", p.Len(), len(want))
	}
	for range 3 { // three streams
		out, err := pooledCodec{}.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("sent %d bytes unlike proto's %d", len(got), len(want))
		}
		out.Free() // as gRPC does once written
	}
	var back keelpb.FetchResponse
	if err := (pooledCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, &back); err != nil || back.GetHighWatermark() != 7 {
		t.Fatalf("decoded %v, %v", &back, err)
	}
	p.Free()
}

type selfDecoded struct{ got []byte }

func (s *selfDecoded) UnmarshalWire(data mem.BufferSlice) error {
	s.got = data.Materialize()
	return nil
}

// An answer that decodes itself gets the raw bytes, not proto's decoding.
func TestPooledCodec_WireUnmarshaler(t *testing.T) {
	var s selfDecoded
	in := []byte("raw bytes")
	if err := (pooledCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(in)}, &s); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.got, in) {
		t.Fatalf("got %q, want %q", s.got, in)
	}
}
