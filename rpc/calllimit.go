package rpc

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// A call costs a server memory before any handler runs: once gRPC has read
// a request's 5-byte length prefix it takes a buffer of that size (up to
// the server's MaxRecvMsgSize) and opens the stream's flow-control window
// to it, so a client that sends a request all but its last byte holds that
// much until the call ends. 200 CreateTopic calls of 4 MiB each, held so
// on one connection by a broker's certificate, took the active controller
// from 41 to 876 MB. Two bounds stop that: the calls in flight on one
// connection (MaxConcurrentStreams: gRPC refuses a stream beyond it, and
// grpc-go's own clients queue their calls instead, which is back-pressure),
// and the calls in flight of one identity over all its connections
// (callLimiter).

// Default bounds on a server's calls in flight.
const (
	// DefaultControllerStreams is the calls in flight on one connection to
	// a controller: a broker's metadata stream, heartbeats, AlterPartition
	// calls and the admin requests it forwards. grpc-go clients queue the
	// rest.
	DefaultControllerStreams = 32
	// DefaultCallsPerIdentity is the calls in flight of one certificate
	// identity on a controller, over all its connections, counted from
	// their headers to their end (a streaming call the client sends one
	// message on, until that message is in): one connection's worth, so a
	// client on one connection is never refused. At maxRecvMsgBytes each,
	// one identity holds 128 MiB of requests (a process's peak is about
	// twice what it holds: the garbage collector's headroom).
	DefaultCallsPerIdentity = 32
	// DefaultBrokerStreams is the calls in flight on one connection to a
	// broker. A follower fetches each partition it follows with a call of
	// its own that waits at the leader for new records
	// (--replica-fetch-interval), so this bounds the partitions a broker
	// follows from one leader without queueing; each request is at most
	// smallRequestBytes (BrokerServerOptions), 1 GiB in all.
	DefaultBrokerStreams = 16384
)

// callLimiter bounds the calls in flight of each identity (a certificate's
// common name). A call is counted from its headers, in the server's tap,
// before gRPC reads any of its request, and released when its stream ends,
// or, for a call whose client sends a single message and then listens (a
// broker's metadata stream, FetchSnapshot, a health Watch), once that
// message is in: those live as long as their client, and their request
// costs nothing after. A call over the bound is refused with
// ResourceExhausted before a byte of its request is read; the tap cannot
// wait (it runs on the connection's reader), so this is a refusal rather
// than back-pressure, which the per-connection bound gives grpc-go clients.
type callLimiter struct {
	max int

	mu     sync.Mutex
	counts map[string]int
}

func newCallLimiter(max int) *callLimiter {
	if max <= 0 {
		return nil
	}
	return &callLimiter{max: max, counts: map[string]int{}}
}

// callSlot is one call's place in its identity's count.
type callSlot struct {
	l    *callLimiter
	who  string
	once sync.Once
}

type callSlotKey struct{}

// admit counts a call of who, or refuses it. The slot is released when
// ctx (the stream's) ends, or earlier by releaseFirstMessage.
func (l *callLimiter) admit(ctx context.Context, who, method string) (context.Context, error) {
	l.mu.Lock()
	if l.counts[who] >= l.max {
		l.mu.Unlock()
		return nil, status.Errorf(codes.ResourceExhausted, "%s: %s already has %d calls in flight on this server, the most one identity may (--max-calls-per-identity)", method, who, l.max)
	}
	l.counts[who]++
	l.mu.Unlock()
	s := &callSlot{l: l, who: who}
	context.AfterFunc(ctx, s.release)
	return context.WithValue(ctx, callSlotKey{}, s), nil
}

// release gives the slot back; only the first release counts.
func (s *callSlot) release() {
	s.once.Do(func() {
		s.l.mu.Lock()
		defer s.l.mu.Unlock()
		if s.l.counts[s.who]--; s.l.counts[s.who] <= 0 {
			delete(s.l.counts, s.who)
		}
	})
}

// inFlight is who's calls counted now.
func (l *callLimiter) inFlight(who string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[who]
}

// tap wraps a server's tap (authorizeTap): a call it lets through is
// counted against its identity.
func (l *callLimiter) tap(next tap.ServerInHandle) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		ctx, err := next(ctx, info)
		if err != nil {
			return nil, err
		}
		id, err := callerIdentity(ctx)
		if err != nil {
			return nil, err
		}
		return l.admit(ctx, id.String(), info.FullMethodName)
	}
}

// releaseFirstMessage releases the slot of a call whose client sends one
// message, once that message is in (see callLimiter).
func releaseFirstMessage(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	s, ok := ss.Context().Value(callSlotKey{}).(*callSlot)
	if !ok || info.IsClientStream {
		return handler(srv, ss)
	}
	return handler(srv, &slotStream{ServerStream: ss, slot: s})
}

type slotStream struct {
	grpc.ServerStream
	slot *callSlot
}

func (s *slotStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.slot.release()
	}
	return err
}
