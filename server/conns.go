package server

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/stats"

	"github.com/keel-dev/keel/controller"
)

// connTracker is a gRPC stats handler that marks each connection's context
// with a flag set when the connection ends, so that a broker's metadata
// stream can tell, after it ended, whether the connection it came on has
// closed since: the mark of a broker process that died (controller's crash
// detection), as opposed to a broker that cancelled its stream on a live
// connection or a controller that ended it. gRPC cancels a connection's
// streams as it closes it and reports ConnEnd just after, so the flag is
// read after the crash grace, not when the stream ends.
type connTracker struct{}

type connKey struct{}

// connState is one connection's flag.
type connState struct{ ended atomic.Bool }

func (connTracker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, &connState{})
}

func (connTracker) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); ok {
		if cs, ok := ctx.Value(connKey{}).(*connState); ok {
			cs.ended.Store(true)
		}
	}
}

func (connTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (connTracker) HandleRPC(context.Context, stats.RPCStats)                       {}

// withConnClosed hands the controller the flag of the connection a stream
// came on (controller.WithConnClosed), if the server tracks it. Once the
// node is stopping, it is the node that closes connections: none counts.
func withConnClosed(ctx context.Context, stopping func() bool) context.Context {
	cs, ok := ctx.Value(connKey{}).(*connState)
	if !ok {
		return ctx
	}
	return controller.WithConnClosed(ctx, func() bool { return cs.ended.Load() && !stopping() })
}
