package controller

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// PushStream is one broker's metadata stream, as gRPC hands it to the
// server (grpc.ServerStreamingServer[keelpb.MetadataPush] is one). Send
// takes the pushes that are this broker's own (snapshot chunks); SendMsg a
// *rpc.PreEncoded push of entries, encoded once for every stream at the
// same position. Both must have written or copied the message when they
// return.
type PushStream interface {
	Send(*keelpb.MetadataPush) error
	SendMsg(m any) error
}

// PushFunc is a PushStream that hands every push, decoded, to a function:
// the in-process callers and the tests that read a stream's pushes.
type PushFunc func(*keelpb.MetadataPush) error

// Send calls f.
func (f PushFunc) Send(p *keelpb.MetadataPush) error { return f(p) }

// SendMsg decodes a pre-encoded push (as a broker would) and calls f.
func (f PushFunc) SendMsg(m any) error {
	switch m := m.(type) {
	case *keelpb.MetadataPush:
		return f(m)
	case *rpc.PreEncoded:
		data, err := m.MarshalWire()
		if err != nil {
			return err
		}
		p := &keelpb.MetadataPush{}
		err = proto.Unmarshal(data.Materialize(), p)
		data.Free()
		if err != nil {
			return err
		}
		return f(p)
	default:
		return fmt.Errorf("cannot send %T as a metadata push", m)
	}
}

// maxSharedPushes bounds the encodings the cache keeps for streams that
// have not reached them yet: each is at most a push (maxPushBytes, or one
// larger entry), and a stream further behind than that encodes its own.
const maxSharedPushes = 32

// pushKey names the one push a stream at a given position sends: the
// controller epoch stamped on it and the entries it carries (the offset
// they follow and the last one's; equal for a push of no entries). The
// entries between are those of the applied history, which one leadership
// never rewrites (a restore starts a new history and moves the epoch on).
type pushKey struct {
	epoch      int64
	prev, last uint64
}

// sharedPush is one encoded push and the streams that hold it.
type sharedPush struct {
	done chan struct{} // closed once enc or err is set
	enc  *rpc.PreEncoded
	err  error
	// refs counts the cache's own hold, while cached, and one per stream
	// between acquire and release; the last release frees enc.
	refs int
}

// pushCache shares the encoding of a push between the broker streams that
// send it. Every broker at the head of the history wakes on the same new
// batch and sends the same push: Kafka's controller builds one
// UpdateMetadata request per broker, and marshalling one push per stream
// made a million partitions' creation, with 100 brokers, copy each batch a
// hundred times on the active controller.
type pushCache struct {
	metrics *metrics // pushEncodes, pushesSent

	mu     sync.Mutex
	closed bool
	byKey  map[pushKey]*sharedPush
	order  []pushKey // cached keys, oldest first
}

func newPushCache(m *metrics) *pushCache {
	return &pushCache{metrics: m, byKey: map[pushKey]*sharedPush{}}
}

// acquire returns the encoding of the push named key, built by build and
// encoded by the first stream that asks; the others wait for that one. The
// caller sends it, then releases it.
func (pc *pushCache) acquire(key pushKey, build func() *keelpb.MetadataPush) (*sharedPush, error) {
	pc.mu.Lock()
	if p, ok := pc.byKey[key]; ok {
		p.refs++
		pc.mu.Unlock()
		<-p.done
		if p.err != nil {
			pc.release(p)
			return nil, p.err
		}
		return p, nil
	}
	p := &sharedPush{done: make(chan struct{}), refs: 1}
	if !pc.closed {
		p.refs++
		pc.byKey[key] = p
		pc.order = append(pc.order, key)
		if len(pc.order) > maxSharedPushes {
			pc.evictLocked(pc.order[0])
			pc.order = pc.order[1:]
		}
	}
	pc.mu.Unlock()
	// Encoded outside mu: streams at other positions need not wait.
	p.enc, p.err = rpc.Encode(build())
	pc.metrics.pushEncodes.Inc()
	close(p.done)
	if p.err != nil {
		pc.mu.Lock()
		if pc.byKey[key] == p {
			// Not kept: the next stream to ask tries again.
			pc.evictLocked(key)
			pc.order = deleteKey(pc.order, key)
		}
		pc.mu.Unlock()
		pc.release(p)
		return nil, p.err
	}
	return p, nil
}

// release drops a stream's hold on p, once its send has returned.
func (pc *pushCache) release(p *sharedPush) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.dropLocked(p)
}

// close drops every cached encoding, when the leadership ends; a stream
// still running encodes its own from then on.
func (pc *pushCache) close() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.closed = true
	for _, k := range pc.order {
		pc.evictLocked(k)
	}
	pc.order = nil
}

func (pc *pushCache) evictLocked(k pushKey) {
	p := pc.byKey[k]
	delete(pc.byKey, k)
	pc.dropLocked(p)
}

func (pc *pushCache) dropLocked(p *sharedPush) {
	p.refs--
	if p.refs == 0 && p.enc != nil {
		p.enc.Free()
	}
}

func deleteKey(keys []pushKey, k pushKey) []pushKey {
	for i, x := range keys {
		if x == k {
			return append(keys[:i], keys[i+1:]...)
		}
	}
	return keys
}
