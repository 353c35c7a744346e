package raftlog

import (
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/keel-dev/keel/internal/poll"
)

// refusingFollower is a raft transport that answers every AppendEntries
// with Success=false, as a follower whose disk is full does.
func refusingFollower(t *testing.T) *raft.NetworkTransport {
	t.Helper()
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case rpc := <-trans.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: false}, nil)
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(done); trans.Close() })
	return trans
}

// sendUnread sends n AppendEntries down p, as raft's replication loop goes
// on doing after its reader of the responses has returned, and reports
// when all were sent.
func sendUnread(p raft.AppendPipeline, n int) <-chan error {
	sent := make(chan error, 1)
	go func() {
		for range n {
			req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("1"), Addr: []byte("x")}, Term: 1}
			if _, err := p.AppendEntries(req, new(raft.AppendEntriesResponse)); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	return sent
}

// TestDrainedPipeline_NeverBlocks: with no one reading the pipeline's
// responses (raft's pipelineDecode returns on the first Success=false),
// the transport's own pipeline blocks its sender after a couple of
// requests, which is how a leader came to wait forever in Shutdown; the
// drained pipeline takes every request, and its Close returns.
func TestDrainedPipeline_NeverBlocks(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	follower := refusingFollower(t)
	leader, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()

	// The premise: the transport's own pipeline, unread, stops taking
	// requests. (What is checked is an absence, so the test watches for a
	// while rather than polling for an event.)
	raw, err := leader.AppendEntriesPipeline("2", follower.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	sent := sendUnread(raw, 50)
	select {
	case err := <-sent:
		t.Fatalf("the transport's unread pipeline took 50 requests (%v): the deadlock this guards against is gone from raft", err)
	case <-time.After(time.Second):
	}
	raw.Close() // frees the blocked sender
	<-sent

	drained, err := leader.AppendEntriesPipeline("2", follower.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	p := newDrainedPipeline(drained, nil)
	sent = sendUnread(p, 50)
	var sendErr error
	poll.Until(t, 10*time.Second, "every request to be taken by the drained pipeline", func() bool {
		select {
		case sendErr = <-sent:
			return true
		default:
			return false
		}
	})
	if sendErr != nil {
		t.Fatalf("AppendEntries on the drained pipeline: %v", sendErr)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
