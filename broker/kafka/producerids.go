package kafka

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/acl"
)

const (
	// allocateTimeout bounds one request for a block of producer ids.
	allocateTimeout = 10 * time.Second
	// initProducerIDWait bounds how long an InitProducerId waits for a
	// block before it answers COORDINATOR_LOAD_IN_PROGRESS (retriable).
	initProducerIDWait = 5 * time.Second
)

// producerIDs hands out producer ids from blocks the active controller
// allocates (KRaft's RPCProducerIdManager): one block in use, the next one
// asked for once 90% of the current is gone, so InitProducerId rarely
// waits for the controller.
type producerIDs struct {
	ctl  Controller
	log  *slog.Logger
	base context.Context // ends at Close
	wg   sync.WaitGroup

	mu        sync.Mutex
	next, end int64 // the block in use: [next, end)
	size      int64 // its length
	spare     idBlock
	inflight  *idFetch // the request for a block under way, if any
}

type idBlock struct {
	start int64
	count int32
}

type idFetch struct {
	done chan struct{}
	err  error
}

func newProducerIDs(base context.Context, ctl Controller, log *slog.Logger) *producerIDs {
	return &producerIDs{ctl: ctl, log: log, base: base}
}

// get returns a producer id no other producer of the cluster has, waiting
// for a new block when none is left, until ctx ends.
func (p *producerIDs) get(ctx context.Context) (int64, error) {
	for {
		p.mu.Lock()
		if p.next >= p.end && p.spare.count > 0 {
			p.next, p.end, p.size = p.spare.start, p.spare.start+int64(p.spare.count), int64(p.spare.count)
			p.spare = idBlock{}
		}
		if p.next < p.end {
			id := p.next
			p.next++
			// Prefetch at 90% used.
			if left := p.end - p.next; left*10 < p.size && p.spare.count == 0 && p.inflight == nil {
				p.startFetchLocked()
			}
			p.mu.Unlock()
			return id, nil
		}
		if p.inflight == nil {
			p.startFetchLocked()
		}
		f := p.inflight
		p.mu.Unlock()
		select {
		case <-f.done:
			if f.err != nil {
				return 0, f.err
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (p *producerIDs) startFetchLocked() {
	f := &idFetch{done: make(chan struct{})}
	p.inflight = f
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(p.base, allocateTimeout)
		start, count, err := p.ctl.AllocateProducerIds(ctx)
		cancel()
		p.mu.Lock()
		if err == nil && count <= 0 {
			err = kerr.UnknownServerError
		}
		if err == nil {
			p.spare = idBlock{start: start, count: count}
		} else {
			p.log.Warn("no block of producer ids from the controllers", "err", err)
		}
		f.err = err
		p.inflight = nil
		p.mu.Unlock()
		close(f.done)
	}()
}

// wait waits for a request for a block under way (Close has ended base).
func (p *producerIDs) wait() { p.wg.Wait() }

// initProducerID gives an idempotent producer a new id at epoch 0. Without
// a transactional id Kafka's coordinator always gives a new id, also to a
// producer that sends its old one (KIP-360's epoch bump asks for it).
func (s *Server) initProducerID(ctx context.Context, c *conn, r *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		// Transactions are not served (ApiVersions does not list them):
		// Kafka's answer to a request of what a broker does not support.
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		return resp
	}
	// Kafka 3: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
	if !s.allowed(c, kmsg.ACLOperationIdempotentWrite, kmsg.ACLResourceTypeCluster, acl.ClusterName) &&
		!s.allowedAny(c, kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp
	}
	ctx, cancel := context.WithTimeout(ctx, initProducerIDWait)
	defer cancel()
	id, err := s.pids.get(ctx)
	if err != nil {
		// Retriable: the client asks again, by when a block may be here.
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp
}
