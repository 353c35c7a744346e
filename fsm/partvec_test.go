package fsm

import (
	"math/rand/v2"
	"testing"
)

// Appends and sets across sizes that grow the trie by levels; every earlier
// version must read as it did.
func TestPartVec_PersistentAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	parts := make([]*Partition, 40_000)
	for i := range parts {
		parts[i] = &Partition{Partition: int32(i)}
	}
	type version struct {
		root  *vnode
		model []*Partition
	}
	check := func(v version) {
		t.Helper()
		n := len(v.model)
		for i, p := range v.model {
			if got := vecGet(v.root, n, i); got != p {
				t.Fatalf("n=%d: element %d differs", n, i)
			}
		}
		i := 0
		vecEach(v.root, n, func(p *Partition) bool {
			if p != v.model[i] {
				t.Fatalf("n=%d: each element %d differs", n, i)
			}
			i++
			return true
		})
		if i != n {
			t.Fatalf("each visited %d of %d", i, n)
		}
	}
	var root *vnode
	var model []*Partition
	var versions []version
	for len(model) < len(parts) {
		own := new(owner)
		for range 1 + r.IntN(3000) {
			n := len(model)
			if n > 0 && r.IntN(4) == 0 {
				i := r.IntN(n)
				p := parts[r.IntN(len(parts))]
				root = vecSet(root, n, i, p, own)
				model[i] = p
			} else if n < len(parts) {
				root = vecSet(root, n, n, parts[n], own)
				model = append(model, parts[n])
			}
		}
		versions = append(versions, version{root, append([]*Partition(nil), model...)})
	}
	for _, v := range versions {
		check(v)
	}
	// Stopping early stops.
	seen := 0
	vecEach(root, len(model), func(*Partition) bool { seen++; return seen < 100 })
	if seen != 100 {
		t.Fatalf("each went on after false: %d", seen)
	}
}
