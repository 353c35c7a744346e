package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

// marshal is deterministic so that the same records always give the same
// bytes: snapshots of equal images are equal byte for byte.
var marshal = proto.MarshalOptions{Deterministic: true}

// marshalSized marshals a message whose sizes marshal.Size has just
// computed (and cached in each message): MarshalAppend would otherwise
// size the whole batch once more before writing it.
var marshalSized = proto.MarshalOptions{Deterministic: true, UseCachedSize: true}

// EncodeBatch turns records into one raft entry: the format byte, then the
// batch. It sizes the batch once, for the buffer, and marshals into it with
// those sizes; the records must not change while it runs.
func EncodeBatch(records ...*keelpb.Record) ([]byte, error) {
	batch := &keelpb.RecordBatch{Records: records}
	size := marshal.Size(batch)
	buf := make([]byte, 1, 1+size)
	buf[0] = EntryFormatV1
	out, err := marshalSized.MarshalAppend(buf, batch)
	if err == nil && len(out) != 1+size {
		// A record changed between sizing and writing: never hand on such
		// an entry.
		return nil, fmt.Errorf("encode batch: %d bytes written, %d sized", len(out)-1, size)
	}
	return out, err
}

// DecodeBatch reads a raft entry written by EncodeBatch.
func DecodeBatch(data []byte) (*keelpb.RecordBatch, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("empty entry")
	}
	if data[0] != EntryFormatV1 {
		return nil, fmt.Errorf("unknown entry format %d", data[0])
	}
	batch := &keelpb.RecordBatch{}
	if err := proto.Unmarshal(data[1:], batch); err != nil {
		return nil, fmt.Errorf("decode batch: %w", err)
	}
	return batch, nil
}
