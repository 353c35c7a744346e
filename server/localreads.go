package server

import (
	"context"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// LocalReads answers the admin API's reads in process, through the code
// the gRPC service answers them with, for the built-in console (package
// console) served on the node's metrics listener: the same answers,
// without a connection to itself. Authorization is the caller's
// (rpc.AuthorizeHTTP).
type LocalReads struct{ svc *controllerService }

// LocalReads returns the node's in-process reads.
func (s *Node) LocalReads() LocalReads {
	return LocalReads{svc: newControllerService(s.ctrl, s, s.cfg.Version, s.cfg.WriteTimeout)}
}

// DescribeQuorum is the admin API's DescribeQuorum: this node's view of
// the quorum, with each voter's replication on the active controller.
func (r LocalReads) DescribeQuorum(ctx context.Context) (*keelpb.DescribeQuorumResponse, error) {
	return r.svc.DescribeQuorum(ctx, &keelpb.DescribeQuorumRequest{})
}

// StaleImage is the image a stale admin read answers from (this node's
// own, leader or not) and the ReadSource saying whose it is and how
// fresh; refused, as those reads are, when the image diverged from the
// quorum's.
func (r LocalReads) StaleImage(ctx context.Context) (*fsm.Image, *keelpb.ReadSource, error) {
	return r.svc.readImage(ctx, false, true)
}

// DescribeFeatures is the admin API's DescribeFeatures: only the active
// controller answers, after asking every voter which levels it supports.
func (r LocalReads) DescribeFeatures(ctx context.Context) (*keelpb.DescribeFeaturesResponse, error) {
	return r.svc.DescribeFeatures(ctx, &keelpb.DescribeFeaturesRequest{})
}
