package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

// A controller starting on a data dir with raft state asks its peers, before
// its raft starts, what they saw it hold (raftlog/highwater.go): a whole
// data dir put back from an older copy cannot tell from inside, but a peer
// that led it, or followed it, remembers. Since every controller may be
// starting at once (a whole quorum restarted), each answers its peers from
// its data dir while it waits for theirs: the gRPC server serves
// AcknowledgedIndex (and health) from the start, and every other call only
// once the node has started (gate).

// DefaultRollbackCheckWait is how long a starting controller waits for its
// peers' answers (keel controller --rollback-check-wait): long enough for
// the peers of a quorum restarted together to come up, short enough that a
// node whose peers are gone starts soon (without a quorum it could do
// nothing meanwhile anyway).
const DefaultRollbackCheckWait = 5 * time.Second

// rollbackAskEvery paces the asks of a peer that did not answer (not up
// yet, or starting): one attempt, then this long before the next.
const rollbackAskEvery = 200 * time.Millisecond

// RollbackCheckMessage is logged when a starting controller begins to ask
// its peers what they saw it hold (tests wait for it).
const RollbackCheckMessage = "asking the other voters what they saw this node hold, before raft starts"

// errStarting answers every call but AcknowledgedIndex until the node has
// started.
var errStarting = status.Error(codes.Unavailable, "the controller is starting")

// servedBeforeStart reports whether method may be served before the node
// has started: what its peers ask as they start, and health checks. The
// peer service answers from raft, which does not exist until then (a voter
// starting its crash election may ask a node that is still starting).
func (s *Node) servedBeforeStart(method string) bool {
	return s.started.Load() || method == keelpb.ControllerService_AcknowledgedIndex_FullMethodName ||
		!strings.HasPrefix(method, "/"+keelpb.ControllerService_ServiceDesc.ServiceName+"/") &&
			!strings.HasPrefix(method, "/"+keelpb.PeerService_ServiceDesc.ServiceName+"/")
}

func (s *Node) gateUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !s.servedBeforeStart(info.FullMethod) {
		return nil, s.startingError()
	}
	return handler(ctx, req)
}

func (s *Node) gateStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !s.servedBeforeStart(info.FullMethod) {
		return s.startingError()
	}
	return handler(srv, ss)
}

// startingError is errStarting, or while raft restores the snapshot (which
// takes seconds for a large image) how far it has read: keel quorum status
// shows that, not a node that looks as if it had lost its state.
func (s *Node) startingError() error {
	if read, size, ok := s.snapshotLoad.Progress(); ok {
		return rpc.LoadingSnapshot(rpc.SnapshotLoad{Read: read, Size: size})
	}
	return errStarting
}

// AcknowledgedIndex answers, from this node's data dir, the highest
// committed index it has seen the asking node hold.
func (s *controllerService) AcknowledgedIndex(_ context.Context, req *keelpb.AcknowledgedIndexRequest) (*keelpb.AcknowledgedIndexResponse, error) {
	hw := s.node.highWater.Load()
	if hw == nil {
		return nil, status.Error(codes.Unavailable, "the controller is starting: its data dir is not read yet")
	}
	return &keelpb.AcknowledgedIndexResponse{NodeId: s.node.cfg.NodeID, Index: hw.Acknowledged(req.GetNodeId())}, nil
}

// beforeRaft runs in raftlog.Open once the data dir passed its own checks:
// from here on this node answers its peers' questions about themselves, and
// a node with raft state asks its own (checkRollback).
func (s *Node) beforeRaft(st raftlog.StartState) error {
	s.highWater.Store(st.HighWater)
	switch {
	case !st.HeldState || len(st.Peers) == 0:
		// A new data dir holds nothing to lose; a lone voter has no one to ask.
		return nil
	case s.cfg.RollbackCheckWait < 0:
		s.log.Warn("not asking the peers whether this data dir was rolled back (--rollback-check-wait is negative)", "data_dir", s.cfg.DataDir)
		return nil
	}
	return s.checkRollback(st)
}

// peerAnswer is one peer's answer to AcknowledgedIndex, or why there is none.
type peerAnswer struct {
	peer  raftlog.Voter
	index uint64
	err   error
}

// checkRollback asks every peer, in parallel, what it saw this node hold,
// for up to RollbackCheckWait (asking again those that do not answer), and
// refuses the start, in one line, as soon as an answer is above the last
// index this node's log holds. A peer that never answers is named in the
// log, and the node starts: it cannot tell.
func (s *Node) checkRollback(st raftlog.StartState) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.RollbackCheckWait)
	defer cancel()
	start := time.Now()
	s.log.Info(RollbackCheckMessage, "data_dir", s.cfg.DataDir, "last_index", st.LastIndex, "peers", len(st.Peers), "wait", s.cfg.RollbackCheckWait)
	answers := make(chan peerAnswer, len(st.Peers))
	for _, p := range st.Peers {
		go func() {
			index, err := askAcknowledged(ctx, s.cfg.TLS, p, s.cfg.NodeID)
			answers <- peerAnswer{peer: p, index: index, err: err}
		}()
	}
	var silent, asked []string
	for range st.Peers {
		a := <-answers
		switch {
		case a.err != nil:
			silent = append(silent, fmt.Sprintf("%d (%v)", a.peer.ID, a.err))
		case a.index > st.LastIndex:
			return raftlog.RolledBackError(s.cfg.DataDir, s.cfg.NodeID, a.peer.ID, a.index, st.LastIndex)
		default:
			asked = append(asked, fmt.Sprintf("%d saw index %d", a.peer.ID, a.index))
		}
	}
	slices.Sort(asked)
	if len(silent) > 0 {
		slices.Sort(silent)
		s.log.Warn("some peers did not say what they saw this node hold: started without knowing from them whether this data dir was rolled back",
			"data_dir", s.cfg.DataDir, "last_index", st.LastIndex, "answered", strings.Join(asked, ", "), "did_not_answer", strings.Join(silent, "; "),
			"waited", time.Since(start).Round(time.Millisecond))
		return nil
	}
	s.log.Info("checked this node's log against what its peers saw it hold: not rolled back",
		"last_index", st.LastIndex, "peers", strings.Join(asked, ", "), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// askAcknowledged asks peer p what it saw node self hold, again every
// rollbackAskEvery until it answers or ctx ends. A peer on a keel from
// before the question answers Unimplemented: it recorded nothing.
func askAcknowledged(ctx context.Context, tls *tlsauth.Config, p raftlog.Voter, self int32) (uint64, error) {
	var last error
	for {
		index, err := askAcknowledgedOnce(ctx, tls, p, self)
		switch status.Code(err) {
		case codes.OK:
			return index, nil
		case codes.Unimplemented:
			return 0, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return 0, last
		case <-time.After(rollbackAskEvery):
		}
	}
}

func askAcknowledgedOnce(ctx context.Context, tls *tlsauth.Config, p raftlog.Voter, self int32) (uint64, error) {
	// A client per attempt: a peer that was not up a moment ago is dialled
	// afresh, not after gRPC's reconnect back-off.
	cl, err := rpc.NewClient([]string{p.Address}, rpc.WithTLS(tls))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	cc, err := cl.Controller(p.Address)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := cc.AcknowledgedIndex(ctx, &keelpb.AcknowledgedIndexRequest{NodeId: self})
	if err != nil {
		return 0, err
	}
	if resp.GetNodeId() != p.ID {
		return 0, fmt.Errorf("the node at %s is node %d", p.Address, resp.GetNodeId())
	}
	return resp.GetIndex(), nil
}
