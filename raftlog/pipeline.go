package raftlog

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// hashicorp/raft's pipelined replication can deadlock (raft v1.7.3; seen
// here as a leader that never stopped, and reported elsewhere as a follower
// that never got another entry): when a follower answers an AppendEntries
// with Success=false (its disk is full, say), raft's pipelineDecode returns
// and no one reads the pipeline's responses any more; the transport's
// decodeResponses then blocks handing over the next response, the pipeline
// of requests in flight fills, pipelineSend blocks adding to it, and the
// replication loop, stuck in pipelineSend, never gets to the Close that
// would free them both. Raft's Shutdown waits for that loop forever.
//
// drainedPipeline breaks the cycle: a goroutine of its own always takes the
// transport's responses, and hands them to raft when raft reads them, so the
// transport never blocks and the loop always gets back to its Close. The
// responses it holds are a pipeline's in flight, at most a few; those raft
// never reads go with the pipeline.
type drainedPipeline struct {
	raft.AppendPipeline
	answered func(raft.AppendFuture) // called with each response, as it comes
	out      chan raft.AppendFuture
	done     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
}

func newDrainedPipeline(p raft.AppendPipeline, answered func(raft.AppendFuture)) *drainedPipeline {
	d := &drainedPipeline{AppendPipeline: p, answered: answered, out: make(chan raft.AppendFuture), done: make(chan struct{})}
	d.wg.Add(1)
	go d.forward()
	return d
}

func (d *drainedPipeline) forward() {
	defer d.wg.Done()
	in := d.AppendPipeline.Consumer()
	var queue []raft.AppendFuture
	for {
		var out chan raft.AppendFuture
		var next raft.AppendFuture
		if len(queue) > 0 {
			out, next = d.out, queue[0]
		}
		select {
		case f := <-in:
			if d.answered != nil {
				d.answered(f)
			}
			queue = append(queue, f)
		case out <- next:
			queue[0] = nil
			queue = queue[1:]
		case <-d.done:
			return
		}
	}
}

// Consumer is where raft reads the responses, in the order sent.
func (d *drainedPipeline) Consumer() <-chan raft.AppendFuture { return d.out }

// Close closes the transport's pipeline and stops the forwarding.
func (d *drainedPipeline) Close() error {
	err := d.AppendPipeline.Close()
	d.once.Do(func() { close(d.done) })
	d.wg.Wait()
	return err
}

// AppendEntriesPipeline is the transport's pipeline, drained
// (drainedPipeline), with each answer recorded (peerProgress).
func (t *watchedTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newDrainedPipeline(p, func(f raft.AppendFuture) {
		// The transport hands over a future once its answer is in, so
		// Error does not wait.
		now := time.Now()
		t.progress.answered(id, f.Request(), f.Response(), f.Error(), now)
		t.peers.answered(id, target, f.Request(), f.Error(), now)
	}), nil
}
