package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

// marshal is deterministic so that the same records always give the same
// bytes: snapshots of equal images are equal byte for byte.
var marshal = proto.MarshalOptions{Deterministic: true}

// EncodeBatch turns records into one raft entry: the format byte, then the batch.
func EncodeBatch(records ...*keelpb.Record) ([]byte, error) {
	batch := &keelpb.RecordBatch{Records: records}
	buf := make([]byte, 1, 1+marshal.Size(batch))
	buf[0] = EntryFormatV1
	return marshal.MarshalAppend(buf, batch)
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
