package replication

import (
	"context"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// FetchSession opens an in-process session with the broker at c.addr: a
// pipe whose answers go through the wire encoding, as over gRPC. With
// e.noSessions the leader answers Unimplemented, as one of an older
// version does.
func (c netConn) FetchSession(ctx context.Context, _ ...grpc.CallOption) (keelpb.BrokerService_FetchSessionClient, error) {
	var id int32
	if _, err := fmt.Sscanf(c.addr, "broker-%d", &id); err != nil || c.e.ms[id] == nil {
		return nil, status.Errorf(codes.Unavailable, "no broker at %s", c.addr)
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &sessionPipe{ctx: ctx, cancel: cancel, reqs: make(chan *keelpb.FetchSessionRequest), answers: make(chan any), done: make(chan struct{})}
	if c.e.noSessions {
		p.err = status.Error(codes.Unimplemented, "unknown method FetchSession")
		close(p.done)
		return p, nil
	}
	m := c.e.ms[id]
	go func() {
		err := m.ReplicaFetchSession(pipeServer{p})
		p.mu.Lock()
		p.err = err
		if err == nil {
			p.err = io.EOF
		}
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// sessionPipe is both ends of an in-process fetch session.
type sessionPipe struct {
	grpc.ClientStream
	ctx     context.Context
	cancel  context.CancelFunc
	reqs    chan *keelpb.FetchSessionRequest
	answers chan any
	done    chan struct{}
	mu      sync.Mutex
	err     error
}

func (p *sessionPipe) end() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *sessionPipe) Context() context.Context { return p.ctx }

func (p *sessionPipe) Send(req *keelpb.FetchSessionRequest) error {
	// As over gRPC: the request is encoded, not shared.
	req = proto.Clone(req).(*keelpb.FetchSessionRequest)
	select {
	case p.reqs <- req:
		return nil
	case <-p.done:
		return io.EOF
	case <-p.ctx.Done():
		return status.FromContextError(p.ctx.Err()).Err()
	}
}

func (p *sessionPipe) Recv() (*keelpb.FetchSessionResponse, error) {
	resp := &keelpb.FetchSessionResponse{}
	if err := p.RecvMsg(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

func (p *sessionPipe) RecvMsg(m any) error {
	select {
	case a := <-p.answers:
		w, ok := a.(rpc.WireMarshaler)
		if !ok {
			return fmt.Errorf("an answer of %T, which does not encode itself", a)
		}
		d, err := w.MarshalWire()
		if err != nil {
			return err
		}
		defer d.Free() // as gRPC frees what it has written
		if u, ok := m.(rpc.WireUnmarshaler); ok {
			return u.UnmarshalWire(d)
		}
		return proto.Unmarshal(d.Materialize(), m.(proto.Message))
	case <-p.done:
		return p.end()
	case <-p.ctx.Done():
		return status.FromContextError(p.ctx.Err()).Err()
	}
}

func (p *sessionPipe) CloseSend() error { p.cancel(); return nil }

// pipeServer is the leader's end.
type pipeServer struct{ p *sessionPipe }

var _ broker.FetchSessionStream = pipeServer{}

func (s pipeServer) Context() context.Context { return s.p.ctx }

func (s pipeServer) Recv() (*keelpb.FetchSessionRequest, error) {
	select {
	case req := <-s.p.reqs:
		if err := rpc.ValidateFetchSession(req); err != nil {
			return nil, err
		}
		return req, nil
	case <-s.p.ctx.Done():
		return nil, s.p.ctx.Err()
	}
}

func (s pipeServer) SendMsg(m any) error {
	select {
	case s.p.answers <- m:
		return nil
	case <-s.p.ctx.Done():
		if w, ok := m.(rpc.WireMarshaler); ok {
			if d, err := w.MarshalWire(); err == nil {
				d.Free()
			}
		}
		return s.p.ctx.Err()
	}
}
