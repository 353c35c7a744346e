package replication

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/bufpool"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// A fetch session's answer skips protobuf's copies of the record bytes: the
// leader writes each partition's header itself and hands gRPC the batches
// in the pooled buffer it read them into, and the follower parses the
// answer itself, the batches aliasing the one buffer it was received in.
// The bytes are keelpb.FetchSessionResponse's protobuf encoding, so that
// either side interoperates with one that uses proto (a test checks both
// ways).

// Field numbers of FetchSessionResponse and FetchSessionPartitionData.
const (
	fieldAnswerPartitions = 1

	fieldDataTopicID        = 1
	fieldDataPartition      = 2
	fieldDataHighWatermark  = 3
	fieldDataLogStartOffset = 4
	fieldDataLogEndOffset   = 5
	fieldDataDivergingEpoch = 6
	fieldDataError          = 7
	fieldDataRecords        = 8
)

// partitionData is one partition of a session's answer.
type partitionData struct {
	tp                   broker.TopicPartition
	hw, logStart, logEnd int64
	diverging            *keelpb.EpochEndOffset
	err                  *keelpb.FetchPartitionError
	records              []byte
}

// answerWriter builds a leader's answer: the partitions' headers written
// into pooled chunks, the records as the buffers they were read into. An
// answer's buffers are its own (gRPC frees them once written): a leader
// may build the next answer before the last one is on the wire, when the
// follower's next request crossed it.
type answerWriter struct {
	chunk *[]byte // headers being written, not yet in data
	// pieces are the headers in chunk: each one's index in data and end
	// in chunk.
	pieces []headerPiece
	fields []byte // one partition's fields, before its length is known
	data   mem.BufferSlice
	parts  int
	bytes  int
}

type headerPiece struct{ at, end int }

// headerChunk is the size of a chunk of headers: some 60 partitions'.
const headerChunk = 4 << 10

// reset starts a new answer.
func (w *answerWriter) reset() {
	w.data, w.parts, w.bytes = nil, 0, 0
}

// add appends one partition. records, when not nil, is the buffer that
// holds d.records, whose reference the answer takes (gRPC frees it once
// written).
func (w *answerWriter) add(d *partitionData, records mem.Buffer) {
	f := w.fields[:0]
	f = protowire.AppendTag(f, fieldDataTopicID, protowire.BytesType)
	f = protowire.AppendBytes(f, d.tp.TopicID[:])
	f = appendVarintField(f, fieldDataPartition, uint64(d.tp.Partition))
	f = appendVarintField(f, fieldDataHighWatermark, uint64(d.hw))
	f = appendVarintField(f, fieldDataLogStartOffset, uint64(d.logStart))
	f = appendVarintField(f, fieldDataLogEndOffset, uint64(d.logEnd))
	f = appendMessageField(f, fieldDataDivergingEpoch, d.diverging)
	f = appendMessageField(f, fieldDataError, d.err)
	w.fields = f
	n := len(d.records)
	size := len(f)
	if n > 0 {
		size += protowire.SizeTag(fieldDataRecords) + protowire.SizeBytes(n)
	}
	need := protowire.SizeTag(fieldAnswerPartitions) + protowire.SizeVarint(uint64(size)) + size - n
	if w.chunk != nil && len(*w.chunk)+need > cap(*w.chunk) {
		w.seal()
	}
	if w.chunk == nil {
		w.chunk = bufpool.Get(max(need, headerChunk))
		*w.chunk = (*w.chunk)[:0]
	}
	h := *w.chunk
	h = protowire.AppendTag(h, fieldAnswerPartitions, protowire.BytesType)
	h = protowire.AppendVarint(h, uint64(size))
	h = append(h, f...)
	if n > 0 {
		h = protowire.AppendTag(h, fieldDataRecords, protowire.BytesType)
		h = protowire.AppendVarint(h, uint64(n))
	}
	*w.chunk = h
	w.pieces = append(w.pieces, headerPiece{at: len(w.data), end: len(h)})
	w.data = append(w.data, nil) // the header, once sealed
	if n > 0 {
		if records == nil {
			records = mem.SliceBuffer(d.records)
		}
		w.data = append(w.data, records)
	}
	w.parts++
	w.bytes += n
}

// seal puts the chunk's headers in data, as buffers sharing the chunk,
// which goes back to the pool when the last is freed.
func (w *answerWriter) seal() {
	if w.chunk == nil {
		return
	}
	buf := mem.NewBuffer(w.chunk, bufpool.Pool{})
	start := 0
	for i, pc := range w.pieces {
		if i == len(w.pieces)-1 {
			w.data[pc.at] = buf
			break
		}
		w.data[pc.at], buf = mem.SplitUnsafe(buf, pc.end-start)
		start = pc.end
	}
	w.chunk, w.pieces = nil, w.pieces[:0]
}

// finish hands over the answer's buffers: the caller frees them (gRPC does
// once it has written them).
func (w *answerWriter) finish() mem.BufferSlice {
	w.seal()
	data := w.data
	w.data = nil
	return data
}

// free drops the references of an answer that is not sent.
func (w *answerWriter) free() {
	w.finish().Free()
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b // proto3: a zero scalar is not encoded
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendMessageField(b []byte, num protowire.Number, m proto.Message) []byte {
	if m == nil || !m.ProtoReflect().IsValid() {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(proto.Size(m)))
	b, _ = proto.MarshalOptions{Deterministic: true, UseCachedSize: true}.MarshalAppend(b, m)
	return b
}

// answerWire is an answer as the leader sends it (rpc.WireMarshaler).
type answerWire struct{ data mem.BufferSlice }

var _ rpc.WireMarshaler = answerWire{}

func (a answerWire) MarshalWire() (mem.BufferSlice, error) { return a.data, nil }

// sessionAnswer is an answer as the follower receives it
// (rpc.WireUnmarshaler): its partitions' records alias buf, which release
// frees.
type sessionAnswer struct {
	parts []partitionData
	buf   mem.Buffer
}

var _ rpc.WireUnmarshaler = (*sessionAnswer)(nil)

// UnmarshalWire parses data, keeping one reference to its bytes in one
// buffer (a copy only when gRPC received it in several).
func (a *sessionAnswer) UnmarshalWire(data mem.BufferSlice) error {
	a.release()
	if len(data) == 1 {
		data[0].Ref()
		a.buf = data[0]
	} else {
		a.buf = data.MaterializeToBuffer(bufpool.Pool{})
	}
	if err := a.parse(a.buf.ReadOnlyData()); err != nil {
		a.release()
		return err
	}
	return nil
}

// release frees the answer's buffer: its records must not be used after.
func (a *sessionAnswer) release() {
	if a.buf != nil {
		a.buf.Free()
		a.buf = nil
	}
	clear(a.parts)
	a.parts = a.parts[:0]
}

var errMalformedAnswer = errors.New("malformed fetch session answer")

func (a *sessionAnswer) parse(b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformedAnswer
		}
		b = b[n:]
		if num != fieldAnswerPartitions || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errMalformedAnswer
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errMalformedAnswer
		}
		b = b[n:]
		var d partitionData
		if err := d.parse(v); err != nil {
			return err
		}
		a.parts = append(a.parts, d)
	}
	return nil
}

func (d *partitionData) parse(b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformedAnswer
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && num >= fieldDataPartition && num <= fieldDataLogEndOffset:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errMalformedAnswer
			}
			b = b[n:]
			switch num {
			case fieldDataPartition:
				d.tp.Partition = int32(v)
			case fieldDataHighWatermark:
				d.hw = int64(v)
			case fieldDataLogStartOffset:
				d.logStart = int64(v)
			case fieldDataLogEndOffset:
				d.logEnd = int64(v)
			}
		case typ == protowire.BytesType && (num == fieldDataTopicID || num >= fieldDataDivergingEpoch && num <= fieldDataRecords):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errMalformedAnswer
			}
			b = b[n:]
			var err error
			switch num {
			case fieldDataTopicID:
				if len(v) != len(fsm.TopicID{}) {
					return fmt.Errorf("%w: topic id of %d bytes", errMalformedAnswer, len(v))
				}
				copy(d.tp.TopicID[:], v)
			case fieldDataDivergingEpoch:
				d.diverging = &keelpb.EpochEndOffset{}
				err = proto.Unmarshal(v, d.diverging)
			case fieldDataError:
				d.err = &keelpb.FetchPartitionError{}
				err = proto.Unmarshal(v, d.err)
			case fieldDataRecords:
				d.records = v
			}
			if err != nil {
				return fmt.Errorf("%w: %v", errMalformedAnswer, err)
			}
		default:
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errMalformedAnswer
			}
			b = b[n:]
		}
	}
	return nil
}
