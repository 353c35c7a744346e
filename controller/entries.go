package controller

import (
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
)

// MaxEntryBytes is the size a decision's raft entry is kept under when the
// decision can be cut: small entries keep one large decision (fencing a
// broker with tens of thousands of replicas) from holding up heartbeats and
// AppendEntries behind one multi-megabyte write, and let raft pipeline the
// pieces.
const MaxEntryBytes = 512 << 10

// splitRecords cuts a decision's records into raft entries of at most limit
// encoded bytes. It cuts only before a PartitionChange record: every
// decision lists its partition changes so that any prefix of them is a
// valid state (each change stands alone: a leader moved to another ISR
// member, a replica left an ISR), and puts the record that must stay whole
// with what it depends on. Topic and Partition records are never cut apart,
// so a topic is created whole or not at all; such a group may exceed limit.
func splitRecords(records []*keelpb.Record, limit int) [][]*keelpb.Record {
	// Without a record to cut before, there is one entry whatever its
	// size: spare sizing every record (a create's thousands) for nothing.
	if !slices.ContainsFunc(records, isPartitionChange) {
		return [][]*keelpb.Record{records}
	}
	var (
		out   [][]*keelpb.Record
		start int
		size  int
	)
	for i, r := range records {
		n := recordSize(r)
		if isPartitionChange(r) && i > start && size+n > limit {
			out = append(out, records[start:i])
			start, size = i, 0
		}
		size += n
	}
	return append(out, records[start:])
}

func isPartitionChange(r *keelpb.Record) bool {
	_, ok := r.GetRecord().(*keelpb.Record_PartitionChange)
	return ok
}

// recordSize is a record's encoded size inside a RecordBatch: the record,
// its length prefix and its field tag.
func recordSize(r *keelpb.Record) int {
	n := proto.Size(r)
	return n + sizeVarint(uint64(n)) + 1
}

func sizeVarint(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
