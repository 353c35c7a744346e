package fsm

import (
	"bytes"
	"sync"

	"github.com/keel-dev/keel/proto/keelpb"
)

// maxOffers bounds the speculations an FSM holds. The active controller
// offers only the entries it has in flight (a few hundred at most), and
// the FSM drops each as it applies its index; the bound only keeps a
// caller that offers and never commits from pinning old images forever.
const maxOffers = 4096

// Speculation is one raft entry the active controller applied ahead of
// commit: the entry's bytes, the raft position it will be applied at, the
// image it was applied to and the image that gave. Only Speculate makes
// one, encoding and applying the same records, so the bytes and the result
// belong together.
//
// When the FSM then applies that entry it may adopt the result instead of
// decoding and applying the bytes again (Offer): Apply is deterministic, a
// function of the prior image, the position and the records, so when all
// of them are the same the result is too. The FSM checks each of them; it
// never takes the speculation's word.
type Speculation struct {
	index, term uint64
	prior, next *Image
	data        []byte
}

// Speculate encodes records as one raft entry and applies them to prior at
// (index, term), as the FSM will once the entry commits there. It fails,
// leaving prior as it was, when the records do not encode or Apply refuses
// them.
func Speculate(prior *Image, index, term uint64, records []*keelpb.Record) (*Speculation, error) {
	data, err := EncodeBatch(records...)
	if err != nil {
		return nil, err
	}
	next, err := Apply(prior, index, term, &keelpb.RecordBatch{Records: records})
	if err != nil {
		return nil, err
	}
	return &Speculation{index: index, term: term, prior: prior, next: next, data: data}, nil
}

// Data is the raft entry to hand to raft: the format byte, then the batch.
func (s *Speculation) Data() []byte { return s.data }

// Image is the image the entry gives when applied at its index.
func (s *Speculation) Image() *Image { return s.next }

// Index is the raft index the entry was applied at.
func (s *Speculation) Index() uint64 { return s.index }

// matches reports whether applying data at (index, term) to cur is the
// very apply s made: then its result is the one Apply would give.
// bytes.Equal costs nothing when data is s's own slice, as it is on the
// node that proposed it.
func (s *Speculation) matches(cur *Image, index, term uint64, data []byte) bool {
	return s.index == index && s.term == term && s.prior == cur && bytes.Equal(s.data, data)
}

// offers holds the speculations an FSM has been offered, in index order.
type offers struct {
	mu sync.Mutex
	q  []*Speculation
}

// add queues s. An offer at or below the newest queued index replaces the
// queue from there: the proposer started again (a new pipeline, a new
// term), and the older offers will not commit as offered.
func (o *offers) add(s *Speculation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.q) > 0 && o.q[len(o.q)-1].index >= s.index {
		o.q[len(o.q)-1] = nil
		o.q = o.q[:len(o.q)-1]
	}
	if len(o.q) == maxOffers {
		o.q[0] = nil
		o.q = o.q[1:]
	}
	o.q = append(o.q, s)
}

// take removes and returns the offer for index, if any, and every offer
// before it (entries applied without one, or never committed).
func (o *offers) take(index uint64) *Speculation {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.q) > 0 && o.q[0].index <= index {
		s := o.q[0]
		o.q[0] = nil
		o.q = o.q[1:]
		if s.index == index {
			return s
		}
	}
	if len(o.q) == 0 {
		o.q = nil // let the backing array go
	}
	return nil
}

// clear drops every offer.
func (o *offers) clear() {
	o.mu.Lock()
	defer o.mu.Unlock()
	clear(o.q)
	o.q = nil
}

// Offer tells the FSM of an entry the caller has applied ahead of commit
// and is about to hand to raft (offer before handing over: an entry that
// commits first is applied the normal way). When the FSM applies an entry
// at s's index, with s's term and bytes, to the very image s was applied
// to, it adopts s's result rather than decoding and applying again; in
// every other case it applies as usual. Offers are dropped as their index
// is applied, at a restore, and by DropOffers.
func (f *FSM) Offer(s *Speculation) {
	if s != nil {
		f.offers.add(s)
	}
}

// DropOffers forgets every offer: a proposer that stops leading calls it,
// so that the images its offers hold are not kept alive.
func (f *FSM) DropOffers() { f.offers.clear() }

// Adopted is the number of committed entries this FSM has applied by
// adopting an offered speculation rather than applying them again.
func (f *FSM) Adopted() uint64 { return f.adopted.Load() }
