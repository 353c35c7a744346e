package fsm

import (
	"cmp"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

type intKey int

func (a intKey) compare(b intKey) int { return cmp.Compare(a, b) }

// checkTree verifies t against the model m: contents, order, length, and
// the B-tree's shape (sorted nodes, node sizes, equal depth).
func checkTree(t *testing.T, tr btree[intKey, int], m map[intKey]int) {
	t.Helper()
	if tr.Len() != len(m) {
		t.Fatalf("Len = %d, want %d", tr.Len(), len(m))
	}
	want := slices.Sorted(maps.Keys(m))
	var got []intKey
	tr.each(func(k intKey, v int) bool {
		if m[k] != v {
			t.Fatalf("key %d = %d, want %d", k, v, m[k])
		}
		got = append(got, k)
		return true
	})
	if !slices.Equal(got, want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	for k, v := range m {
		if g, ok := tr.get(k); !ok || g != v {
			t.Fatalf("get(%d) = %d, %v", k, g, ok)
		}
	}
	if tr.root == nil {
		return
	}
	depth := -1
	var walk func(n *bnode[intKey, int], d int, root bool)
	walk = func(n *bnode[intKey, int], d int, root bool) {
		if len(n.items) > maxItems || (!root && len(n.items) < minItems) {
			t.Fatalf("node of %d items", len(n.items))
		}
		if n.kids == nil {
			if depth >= 0 && depth != d {
				t.Fatalf("leaves at depths %d and %d", depth, d)
			}
			depth = d
			return
		}
		if len(n.kids) != len(n.items)+1 {
			t.Fatalf("%d kids for %d items", len(n.kids), len(n.items))
		}
		for _, k := range n.kids {
			walk(k, d+1, false)
		}
	}
	walk(tr.root, 0, true)
}

// Random sets and deletes, each batch under its own owner, against a map;
// every earlier version must stay as it was.
func TestBTree_PersistentAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var tr btree[intKey, int]
	m := map[intKey]int{}
	type version struct {
		tree  btree[intKey, int]
		model map[intKey]int
	}
	var versions []version
	for batch := 0; batch < 300; batch++ {
		own := new(owner)
		n := 1 + r.IntN(200)
		for i := 0; i < n; i++ {
			k := intKey(r.IntN(2000))
			if r.IntN(3) == 0 {
				_, had := m[k]
				if got := tr.delete(own, k); got != had {
					t.Fatalf("delete(%d) = %v, want %v", k, got, had)
				}
				delete(m, k)
			} else {
				v := r.Int()
				tr.set(own, k, v)
				m[k] = v
			}
		}
		checkTree(t, tr, m)
		versions = append(versions, version{tr, maps.Clone(m)})
	}
	for _, v := range versions {
		checkTree(t, v.tree, v.model)
	}
	// Delete everything.
	own := new(owner)
	for k := range m {
		tr.delete(own, k)
	}
	checkTree(t, tr, map[intKey]int{})
}

func TestBTree_AscendFrom(t *testing.T) {
	var tr btree[intKey, int]
	own := new(owner)
	for k := 0; k < 5000; k += 5 {
		tr.set(own, intKey(k), k)
	}
	for _, from := range []int{-1, 0, 3, 5, 2500, 4994, 4995, 4996, 9999} {
		var got []intKey
		tr.ascendFrom(intKey(from), func(k intKey, _ int) bool {
			got = append(got, k)
			return len(got) < 3
		})
		var want []intKey
		for k := max(0, (from+4)/5*5); k < 5000 && len(want) < 3; k += 5 {
			want = append(want, intKey(k))
		}
		if !slices.Equal(got, want) {
			t.Errorf("ascendFrom(%d) = %v, want %v", from, got, want)
		}
	}
}
