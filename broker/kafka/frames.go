package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/internal/bufpool"
)

// Request frames come from internal/bufpool, and a Produce's or a Fetch's
// goes back once its answer is written: a produce's frame is most of the
// bytes a broker allocates otherwise (one a request, the size of its
// records). kmsg's parse aliases the frame for every bytes field (a
// produce's records, a JoinGroup's member metadata, a SASL token), so a
// frame may go back only when nothing holds such a slice past the answer.
// A produce's records are copied by the append (Backend.ProduceAppend
// keeps no slice of its batch) and a fetch's request has no bytes field
// that outlives its answer; every other request's frame is left to the
// garbage collector, as a handler may keep what it parsed (a group's
// member metadata lives as long as the group).

// pooledKey: the frames of requests of key go back to the pool.
func pooledKey(key int16) bool { return key == produceKey || key == fetchKey }

// newFrame is a buffer of size bytes for the frame of a request of key:
// from the pool for Produce and Fetch (pooledKey), allocated for the
// others.
func newFrame(key int16, size int32) *[]byte {
	if pooledKey(key) {
		return bufpool.Get(int(size))
	}
	b := make([]byte, size)
	return &b
}

// answerSize is about the bytes resp encodes to, header and size
// included, for the buffer write encodes it into: a fetch's records and a
// margin for its other fields; the smallest pooled buffer for any other
// answer, which appends past it when it must.
func answerSize(resp kmsg.Response) int {
	const small = 4 << 10
	fr, ok := resp.(*kmsg.FetchResponse)
	if !ok {
		return small
	}
	n := small
	for i := range fr.Topics {
		t := &fr.Topics[i]
		n += len(t.Topic) + 32
		for j := range t.Partitions {
			n += len(t.Partitions[j].RecordBatches) + 96
		}
	}
	return n
}
