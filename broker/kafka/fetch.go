package kafka

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/bufpool"
)

// fetchSlot is one partition of a Fetch request and its answer.
type fetchSlot struct {
	topic string
	rp    kmsg.FetchRequestTopicPartition
	out   *kmsg.FetchResponseTopicPartition
	ok    bool // the image let it through to the backend
	// While the request waits: the bytes the partition has for it that
	// were seen, and the offset after them, where the next look reads.
	avail int64
	next  int64
	// pooled: the buffer out.RecordBatches lies in (Backend.Fetch), given
	// back when the answer is read again, or once it is written.
	pooled *[]byte
}

// fetchWatch is one partition a waiting fetch watches, however many times
// the request names it: a client cannot make one change wake a request
// more than once.
type fetchWatch struct {
	slots []*fetchSlot
	dirty atomic.Bool // woken since its last read
	stop  func()
}

// pendingFetch is a Fetch being answered: its answer, and the bytes read
// into it so far.
type pendingFetch struct {
	s      *Server
	resp   *kmsg.FetchResponse
	slots  []*fetchSlot
	budget int64 // the answer's bytes (KIP-74)
	total  int64
	woken  chan struct{} // a watched partition changed
}

// fetch answers a Fetch: at once if the partitions have MinBytes for it
// (or it asks for no wait), else once they have, or one of them fails, or
// its wait ends: the smaller of its MaxWaitMillis and Config.FetchMaxWait.
// A wait is Kafka's DelayedFetch: one goroutine for the whole request,
// woken by the partitions it watches (Backend.Watch), which reads them
// again; it ends with the connection (ctx), and then the answer read first
// stands (nobody reads it). ready is closed once the answer is complete;
// release gives back the buffers its records lie in, once it is written.
func (s *Server) fetch(ctx context.Context, c *conn, r *kmsg.FetchRequest) (resp kmsg.Response, ready chan struct{}, release func()) {
	f := s.newFetch(c, r)
	f.readAll()
	wait := min(time.Duration(r.MaxWaitMillis)*time.Millisecond, s.cfg.FetchMaxWait)
	// More than the answer may hold is never there to wait for.
	minBytes := min(int64(max(r.MinBytes, 1)), f.budget)
	if f.total >= minBytes || wait <= 0 {
		f.finish()
		return f.resp, readyNow, f.release
	}
	watches := f.watch()
	if len(watches) == 0 {
		// Every partition failed: nothing to wait for.
		f.finish()
		return f.resp, readyNow, f.release
	}
	ready = make(chan struct{})
	s.wg.Add(1)
	s.met.fetchWaiting(1)
	go func() {
		defer s.wg.Done()
		defer close(ready)
		defer f.finish()
		defer s.met.fetchWaiting(-1)
		defer func() {
			for _, w := range watches {
				w.stop()
			}
		}()
		if f.wait(ctx, watches, wait, minBytes) {
			f.readAll()
		}
	}()
	return f.resp, ready, f.release
}

// newFetch lays out a Fetch's answer, each partition refused by the image
// already answered.
func (s *Server) newFetch(c *conn, r *kmsg.FetchRequest) *pendingFetch {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	img := s.cfg.Image.Image()
	// Sessionless (no KIP-227): session id 0 tells the client so.
	resp.SessionID = 0
	budget := int64(r.MaxBytes)
	if r.Version < 3 || budget <= 0 || budget > maxFetchResponse {
		budget = maxFetchResponse
	}
	f := &pendingFetch{s: s, resp: resp, budget: budget}
	resp.Topics = make([]kmsg.FetchResponseTopic, len(r.Topics))
	for i, rt := range r.Topics {
		t := &resp.Topics[i]
		t.Topic = rt.Topic
		t.Partitions = make([]kmsg.FetchResponseTopicPartition, len(rt.Partitions))
		// A replica's fetch is refused below whatever the ACLs say.
		denied := r.ReplicaID < 0 && !s.allowed(c, kmsg.ACLOperationRead, kmsg.ACLResourceTypeTopic, rt.Topic)
		for j, rp := range rt.Partitions {
			p := &t.Partitions[j]
			*p = kmsg.NewFetchResponseTopicPartition()
			p.Partition, p.HighWatermark, p.LastStableOffset, p.LogStartOffset = rp.Partition, -1, -1, -1
			sl := &fetchSlot{topic: rt.Topic, rp: rp, out: p}
			if denied {
				p.ErrorCode = kerr.TopicAuthorizationFailed.Code
			} else if ke := s.fetchCheck(img, r, rt.Topic, rp.Partition); ke != nil {
				p.ErrorCode = ke.Code
			} else {
				sl.ok = true
			}
			f.slots = append(f.slots, sl)
		}
	}
	return f
}

// readAll reads every partition the image let through, in the request's
// order, into the answer, within its byte budget (KIP-74: at least one
// batch), replacing what an earlier read put there.
func (f *pendingFetch) readAll() {
	f.total = 0
	for _, sl := range f.slots {
		if !sl.ok {
			continue
		}
		sl.out.RecordBatches = nil
		bufpool.Put(sl.pooled)
		sl.pooled = nil
		limit := sl.rp.PartitionMaxBytes
		if left := f.budget - f.total; int64(limit) > left {
			limit = int32(max(left, 1)) // KIP-74: at least one batch
		}
		res, err := f.read(sl, limit)
		if err != nil {
			sl.out.ErrorCode = codeOf(err)
			continue
		}
		sl.out.ErrorCode = 0
		sl.out.HighWatermark, sl.out.LastStableOffset, sl.out.LogStartOffset = res.HighWatermark, res.HighWatermark, res.LogStartOffset
		sl.avail, sl.next = int64(len(res.Records)), sl.rp.FetchOffset
		if next, ok := offsetAfter(res.Records); ok {
			sl.next = next
		}
		if f.total > 0 && f.total+int64(len(res.Records)) > f.budget {
			res.Release()
			continue // over the response's budget: the next fetch gets it
		}
		sl.out.RecordBatches, sl.pooled = res.Records, res.Pooled
		f.total += int64(len(res.Records))
	}
}

// release gives back the buffers the answer's records lie in: once the
// answer is written, or dropped.
func (f *pendingFetch) release() {
	for _, sl := range f.slots {
		bufpool.Put(sl.pooled)
		sl.pooled = nil
	}
}

// finish completes the answer: a partition with nothing to return gets
// empty records, never null. Kafka sends MemoryRecords.EMPTY, and
// librdkafka 2.0 refuses a null record set ("invalid MessageSetSize -1")
// and retries the whole fetch, so that a consumer at the high watermark
// (kcat -e) never saw the end.
func (f *pendingFetch) finish() {
	for _, sl := range f.slots {
		if sl.out.RecordBatches == nil {
			sl.out.RecordBatches = []byte{}
		}
	}
}

// read reads one partition from the request's offset, without waiting.
func (f *pendingFetch) read(sl *fetchSlot, limit int32) (broker.FetchResult, error) {
	return f.readAt(sl, sl.rp.FetchOffset, limit)
}

func (f *pendingFetch) readAt(sl *fetchSlot, offset int64, limit int32) (broker.FetchResult, error) {
	// A read that does not wait does not block: the request's context is
	// the waiter's to watch, not the backend's.
	return f.s.cfg.Backend.Fetch(f.s.ctx, sl.topic, sl.rp.Partition, sl.rp.CurrentLeaderEpoch, offset, limit, 0)
}

// watch watches each distinct partition that answered without an error.
// The watches start woken: data that came between the first read and the
// watch is seen at the first look (Kafka's tryCompleteElseWatch looks
// again once watching).
func (f *pendingFetch) watch() []*fetchWatch {
	woken := make(chan struct{}, 1)
	byTP := map[tp]*fetchWatch{}
	var watches []*fetchWatch
	for _, sl := range f.slots {
		if !sl.ok || sl.out.ErrorCode != 0 {
			continue
		}
		k := tp{sl.topic, sl.rp.Partition}
		w := byTP[k]
		if w == nil {
			w = &fetchWatch{}
			byTP[k] = w
			watches = append(watches, w)
		}
		w.slots = append(w.slots, sl)
	}
	wake := func(w *fetchWatch) {
		w.dirty.Store(true)
		select {
		case woken <- struct{}{}:
		default:
		}
	}
	for k, w := range byTP {
		w.stop = f.s.cfg.Backend.Watch(k.topic, k.partition, func() { wake(w) })
		wake(w)
	}
	f.woken = woken
	return watches
}

// wait waits until the watched partitions have minBytes for the request
// between them, or one of them fails, or d has passed: true, the answer
// is to be read again. Or until ctx ends (the connection or the listener
// closed): false, the answer read first stands.
func (f *pendingFetch) wait(ctx context.Context, watches []*fetchWatch, d time.Duration, minBytes int64) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case <-f.woken:
		}
		if f.satisfied(watches, minBytes) {
			return ctx.Err() == nil
		}
	}
}

// satisfied looks at the partitions woken since it last did, reading only
// what they got since (Kafka's DelayedFetch.tryComplete): true once the
// request's partitions have minBytes for it between them, or one of them
// fails (the final read answers its error). A look stops reading once it
// has seen minBytes, however often the request names a partition.
func (f *pendingFetch) satisfied(watches []*fetchWatch, minBytes int64) bool {
	var avail int64
	for _, w := range watches {
		for _, sl := range w.slots {
			avail += sl.avail
		}
	}
	for _, w := range watches {
		if !w.dirty.Swap(false) {
			continue
		}
		for _, sl := range w.slots {
			if avail >= minBytes {
				return true
			}
			left := min(int64(sl.rp.PartitionMaxBytes), f.budget) - sl.avail
			if left <= 0 {
				continue // it has all the answer may take of it
			}
			res, err := f.readAt(sl, sl.next, int32(left))
			if err != nil {
				return true
			}
			// Only counted: the final read reads the records again.
			n := int64(len(res.Records))
			next, ok := offsetAfter(res.Records)
			res.Release()
			if n > 0 && !ok {
				return true // not whole batches: the final read answers
			}
			if ok {
				sl.next = next
			}
			sl.avail += n
			avail += n
		}
	}
	return avail >= minBytes
}

// offsetAfter is the offset after the last of records' whole v2 batches
// (their header's base offset and last offset delta): false if there is
// none, or the bytes are not whole batches.
func offsetAfter(records []byte) (int64, bool) {
	var next int64
	found := false
	for len(records) > 0 {
		if len(records) < batchHeaderSize {
			return 0, false
		}
		size := int64(int32(binary.BigEndian.Uint32(records[batchLengthAt:]))) + 12
		if size < batchHeaderSize || size > int64(len(records)) {
			return 0, false
		}
		next = int64(binary.BigEndian.Uint64(records)) + int64(int32(binary.BigEndian.Uint32(records[lastOffsetDeltaAt:]))) + 1
		found = true
		records = records[size:]
	}
	return next, found
}

// fetchCheck is a partition's refusal of a fetch before any read: a fetch
// in a replica's name (Kafka's isFromFollower: replica id 0 or more) gets
// TOPIC_AUTHORIZATION_FAILED, as Kafka answers one from a principal
// without CLUSTER_ACTION. Keel's brokers replicate over their gRPC port,
// with their own certificates, never through this listener: here no client
// is a replica, and none moves a follower's state. Otherwise, the leader's.
func (s *Server) fetchCheck(img *fsm.Image, r *kmsg.FetchRequest, topic string, partition int32) *kerr.Error {
	if r.ReplicaID >= 0 {
		return kerr.TopicAuthorizationFailed
	}
	return s.leaderCheck(img, topic, partition)
}
