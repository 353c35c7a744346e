package kafka

import (
	"bufio"
	"context"
	"encoding/binary"
)

// A request other than a produce costs far more memory than its frame:
// kmsg decodes every topic and partition into a struct of its own, and the
// handler builds an answer of the same shape, each several times its few
// bytes on the wire. Measured with TestLimits_DecodeAmplification, the
// bytes allocated from a frame to its answer encoded, per byte of the
// frame: 13-15 for a Fetch or ListOffsets packed with empty partitions or
// topics, 27 for a Metadata request naming empty topics. A produce
// keeps its records as the bytes received, so it costs about its size.
// Hence a much lower size limit for every request but Produce
// (MaxOtherRequestSize), and a charge against the request budgets of
// otherRequestCost times the frame.
const otherRequestCost = 32

// produceKey is Produce's API key.
const produceKey = 0

// requestLimit is the largest frame a request of key may have.
func (s *Server) requestLimit(key int16) int32 {
	if key == produceKey {
		return s.cfg.MaxRequestSize
	}
	return min(s.cfg.MaxRequestSize, s.cfg.MaxOtherRequestSize)
}

// requestCost is what a request of key in a frame of size bytes is
// charged against the budgets: an estimate of the memory it holds until
// its answer is written.
func requestCost(key int16, size int32) int64 {
	if key == produceKey {
		return int64(size)
	}
	return otherRequestCost * int64(size)
}

// peekKey is the API key of the frame of size bytes whose body r is at,
// without consuming it. A frame too short to hold one gets key -1 (and is
// refused by its size).
func peekKey(r *bufio.Reader, size int32) (int16, error) {
	if size < 2 {
		return -1, nil
	}
	b, err := r.Peek(2)
	if err != nil {
		return -1, err
	}
	return int16(binary.BigEndian.Uint16(b)), nil
}

// lease is a request's bytes in a connection's budget and the broker's.
type lease struct {
	conn, broker   *budget
	nConn, nBroker int64
}

// lease takes a request's cost (requestCost) from conn's budget, then the
// broker's for its kind (produce or other), waiting for each as long as it must (back-pressure: the
// connection reads nothing meanwhile). It fails only when ctx ends (the
// connection or the listener closes), having taken nothing.
func (s *Server) lease(ctx context.Context, conn *budget, key int16, size int32) (lease, error) {
	cost := requestCost(key, size)
	l := lease{conn: conn, broker: s.otherBudget}
	if key == produceKey {
		l.broker = s.produceBudget
	}
	var waitedConn, waitedBroker bool
	var err error
	if l.nConn, waitedConn, err = conn.acquire(ctx, cost); err != nil {
		return lease{}, err
	}
	if l.nBroker, waitedBroker, err = l.broker.acquire(ctx, cost); err != nil {
		conn.release(l.nConn)
		return lease{}, err
	}
	if waitedConn || waitedBroker {
		s.met.budgetWaited()
	}
	return l, nil
}

// release gives the lease's bytes back; a second release does nothing.
func (l *lease) release() {
	l.broker.release(l.nBroker)
	l.conn.release(l.nConn)
	*l = lease{}
}
