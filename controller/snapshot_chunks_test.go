package controller

import (
	"bytes"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

// TestChunkWriter cuts a stream into chunks of exactly snapshotChunkBytes,
// whatever the sizes of the writes, and marks only the last one.
func TestChunkWriter(t *testing.T) {
	data := make([]byte, 2*snapshotChunkBytes+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	var got []*keelpb.SnapshotChunk
	w := &chunkWriter{send: func(c *keelpb.SnapshotChunk) error { got = append(got, c); return nil }}
	for rest, step := data, 1; len(rest) > 0; step = step*3 + 1 {
		n := min(step, len(rest))
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d chunks, want 3", len(got))
	}
	var joined []byte
	for i, c := range got {
		if c.Last != (i == len(got)-1) {
			t.Errorf("chunk %d: last = %v", i, c.Last)
		}
		if i < len(got)-1 && len(c.Data) != snapshotChunkBytes {
			t.Errorf("chunk %d: %d bytes, want %d", i, len(c.Data), snapshotChunkBytes)
		}
		joined = append(joined, c.Data...)
	}
	if !bytes.Equal(joined, data) {
		t.Error("the chunks do not add up to the stream written")
	}
}
