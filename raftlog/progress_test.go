package raftlog

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestPeerProgress(t *testing.T) {
	var p peerProgress
	t0 := time.Unix(1000, 0)
	appendReq := func(term, prev uint64, entries ...uint64) *raft.AppendEntriesRequest {
		r := &raft.AppendEntriesRequest{Term: term, PrevLogEntry: prev}
		for _, i := range entries {
			r.Entries = append(r.Entries, &raft.Log{Index: i})
		}
		return r
	}
	ok := &raft.AppendEntriesResponse{Success: true}
	refused := &raft.AppendEntriesResponse{Success: false}

	p.answered("2", appendReq(3, 0), ok, nil, t0) // a heartbeat: contact only
	if got := p.of("2", 3); got.Match != 0 || !got.Contact.Equal(t0) {
		t.Fatalf("after a heartbeat: %+v", got)
	}
	p.answered("2", appendReq(3, 10, 11, 12), ok, nil, t0.Add(time.Second))
	p.answered("2", appendReq(3, 12), ok, nil, t0.Add(2*time.Second)) // caught up, nothing to send
	if got := p.of("2", 3); got.Match != 12 || !got.Contact.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("after appends: %+v", got)
	}
	p.answered("2", appendReq(3, 20, 21), refused, nil, t0.Add(3*time.Second))
	if got := p.of("2", 3); got.Match != 12 || !got.Contact.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("a refusal is contact, not progress: %+v", got)
	}
	p.answered("2", appendReq(3, 12, 13), nil, errors.New("EOF"), t0.Add(4*time.Second))
	if got := p.of("2", 3); !got.Contact.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("a failed call is no contact: %+v", got)
	}
	if got := p.of("2", 4); got != (PeerProgress{}) {
		t.Fatalf("another term: %+v, want nothing", got)
	}
	p.answered("2", appendReq(4, 5, 6), ok, nil, t0.Add(5*time.Second)) // a new leadership starts over
	p.answered("2", appendReq(3, 12, 13), ok, nil, t0.Add(6*time.Second))
	if got := p.of("2", 4); got.Match != 6 || !got.Contact.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("a late answer from an older term counted: %+v", got)
	}
	if got := p.of("3", 4); got != (PeerProgress{}) {
		t.Fatalf("a peer never heard from: %+v", got)
	}
}
