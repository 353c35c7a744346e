package fsm

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

// TestFSM_AdoptSpeculation: the FSM adopts an offered speculation only when
// the entry it applies is the very one speculated on (same index, term and
// bytes, applied to the image the FSM holds); in every other case it applies
// the entry itself, and the image is the same either way.
func TestFSM_AdoptSpeculation(t *testing.T) {
	base := fuzzBase(t)
	id := TopicID{0xf}
	move := []*keelpb.Record{change(id, 0, leader(2), []int32{2, 3}, nil)}
	other := []*keelpb.Record{change(id, 0, leader(3), []int32{3}, nil)}
	next := base.Offset + 1
	tests := []struct {
		name string
		// spec is the speculation offered; apply is what the FSM is
		// then given.
		spec        func(t *testing.T) *Speculation
		index, term uint64
		data        func(s *Speculation) []byte
		adopted     bool
	}{
		{name: "identical entry is adopted", spec: speculated(base, next, 1, move), index: next, term: 1,
			data: func(s *Speculation) []byte { return s.Data() }, adopted: true},
		{name: "a copy of the same bytes is adopted", spec: speculated(base, next, 1, move), index: next, term: 1,
			data: func(s *Speculation) []byte { return bytes.Clone(s.Data()) }, adopted: true},
		{name: "different prior image", spec: speculated(fuzzBase(t), next, 1, move), index: next, term: 1,
			data: func(s *Speculation) []byte { return s.Data() }},
		{name: "different bytes", spec: speculated(base, next, 1, move), index: next, term: 1,
			data: func(*Speculation) []byte { return encoded(t, other) }},
		{name: "bytes differing in one byte", spec: speculated(base, next, 1, move), index: next, term: 1,
			data: func(s *Speculation) []byte {
				d := bytes.Clone(s.Data())
				d[len(d)-1] ^= 1
				return d
			}},
		{name: "different index", spec: speculated(base, next+1, 1, move), index: next, term: 1,
			data: func(s *Speculation) []byte { return s.Data() }},
		{name: "different term", spec: speculated(base, next, 1, move), index: next, term: 2,
			data: func(s *Speculation) []byte { return s.Data() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := New()
			f.Install(base)
			s := tt.spec(t)
			f.Offer(s)
			data := tt.data(s)
			resp := f.ApplyEntry(tt.index, tt.term, data)
			if got := f.Adopted() == 1; got != tt.adopted {
				t.Fatalf("adopted %d entries, want adopted %v", f.Adopted(), tt.adopted)
			}
			if tt.adopted && f.Image() != s.Image() {
				t.Fatal("adopted, but the image is not the speculation's")
			}
			// Either way, the image is what applying the entry gives.
			want, werr := applyData(base, tt.index, tt.term, data)
			if (resp == nil) != (werr == nil) {
				t.Fatalf("ApplyEntry = %v, a fresh apply = %v", resp, werr)
			}
			if werr == nil && !sameImage(t, f.Image(), want) {
				t.Fatal("the image differs from a fresh apply of the entry")
			}
			if s := f.offers.take(tt.index + 100); s != nil || len(f.offers.q) != 0 {
				t.Fatal("the offer outlived the index it was for")
			}
		})
	}
}

// TestFSM_OffersDropped: offers go at a restore, at DropOffers, when a
// later index is applied, and when a proposer offers again from an earlier
// index; they never exceed maxOffers.
func TestFSM_OffersDropped(t *testing.T) {
	base := fuzzBase(t)
	id := TopicID{0xf}
	move := []*keelpb.Record{change(id, 0, leader(2), []int32{2, 3}, nil)}
	next := base.Offset + 1

	f := New()
	f.Install(base)
	f.Offer(speculated(base, next, 1, move)(t))
	f.Install(base)
	if len(f.offers.q) != 0 {
		t.Fatal("Install kept an offer")
	}
	f.Offer(speculated(base, next, 1, move)(t))
	f.DropOffers()
	if len(f.offers.q) != 0 {
		t.Fatal("DropOffers kept an offer")
	}

	s1 := speculated(base, next, 1, move)(t)
	s2 := speculated(s1.Image(), next+1, 1, []*keelpb.Record{change(id, 0, leader(3), []int32{3}, nil)})(t)
	f.Offer(s1)
	f.Offer(s2)
	f.Offer(speculated(base, next, 2, move)(t)) // a new term, from next again
	if len(f.offers.q) != 1 || f.offers.q[0].term != 2 {
		t.Fatalf("offers after a restart from an earlier index: %d", len(f.offers.q))
	}
	if resp := f.ApplyEntry(next+1, 2, s2.Data()); resp != nil {
		t.Fatal(resp)
	}
	if len(f.offers.q) != 0 || f.Adopted() != 0 {
		t.Fatalf("after applying a later index: %d offers, %d adopted", len(f.offers.q), f.Adopted())
	}

	for i := range maxOffers + 10 {
		f.Offer(&Speculation{index: next + 2 + uint64(i)})
	}
	if len(f.offers.q) != maxOffers || f.offers.q[0].index != next+12 {
		t.Fatalf("%d offers, the oldest at %d", len(f.offers.q), f.offers.q[0].index)
	}
}

// TestFSM_AdoptedEqualsApplied is the property the adoption rests on: over
// random logs (valid and refused batches, torn entries), an FSM that is
// offered a speculation for most entries, made from the records before
// they were ever encoded, ends with the image of one that decodes and
// applies every entry, after every entry.
func TestFSM_AdoptedEqualsApplied(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		batches, log := randomRecordLog(seed, 200)
		r := rand.New(rand.NewPCG(seed, 7))
		spec, plain := New(), New()
		offered, adopted := 0, uint64(0)
		for i, recs := range batches {
			index, term := uint64(i+1), uint64(1+i/50)
			data := log[i]
			if r.IntN(8) > 0 {
				if s, err := Speculate(spec.Image(), index, term, recs); err == nil {
					if bytes.Equal(s.Data(), data) {
						offered++
					}
					spec.Offer(s)
				}
			}
			rs, rp := spec.ApplyEntry(index, term, data), plain.ApplyEntry(index, term, data)
			if (rs == nil) != (rp == nil) {
				t.Fatalf("seed %d entry %d: %v with offers, %v without", seed, index, rs, rp)
			}
			if (i%5 == 0 || i == len(batches)-1) && !sameImage(t, spec.Image(), plain.Image()) {
				t.Fatalf("seed %d entry %d: the images differ", seed, index)
			}
		}
		adopted = spec.Adopted()
		if adopted != uint64(offered) || plain.Adopted() != 0 {
			t.Fatalf("seed %d: %d adopted of %d offered intact", seed, adopted, offered)
		}
		if adopted == 0 {
			t.Fatalf("seed %d: nothing was adopted", seed)
		}
	}
}

func speculated(prior *Image, index, term uint64, recs []*keelpb.Record) func(t *testing.T) *Speculation {
	return func(t *testing.T) *Speculation {
		t.Helper()
		s, err := Speculate(prior, index, term, recs)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func encoded(t *testing.T, recs []*keelpb.Record) []byte {
	t.Helper()
	data, err := EncodeBatch(recs...)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func applyData(img *Image, index, term uint64, data []byte) (*Image, error) {
	b, err := DecodeBatch(data)
	if err != nil {
		return nil, err
	}
	return Apply(img, index, term, b)
}
