package memlog

import "github.com/keel-dev/keel/consensus"

// future is every future the log returns. It is resolved once, under the
// cluster's lock, by whoever settles its entry: the proposer's applier, a
// leadership loss, or Close. Waiting on it starts no goroutine.
type future struct {
	index uint64 // set before the future is handed out, never changed
	done  chan struct{}
	resp  any
	err   error
}

var _ consensus.ApplyFuture = (*future)(nil)

func newFuture(index uint64) *future {
	return &future{index: index, done: make(chan struct{})}
}

// failed is a future that has already failed: nothing was appended.
func failed(err error) *future {
	f := newFuture(0)
	f.resolve(nil, err)
	return f
}

func (f *future) resolve(resp any, err error) {
	f.resp, f.err = resp, err
	close(f.done)
}

// Error blocks until the entry has been applied on the node that proposed
// it, or has failed.
func (f *future) Error() error {
	<-f.done
	return f.err
}

// Index is the entry's index; 0 if nothing was appended.
func (f *future) Index() uint64 { return f.index }

// Response is what the proposer's state machine returned for the entry.
func (f *future) Response() any {
	<-f.done
	return f.resp
}
