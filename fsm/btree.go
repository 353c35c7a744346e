package fsm

// A persistent ordered map: a B-tree whose nodes are shared between image
// versions and copied on write. A batch edits through an *owner token: the
// first write to a node the batch does not own copies it (and the path above
// it), later writes in the same batch edit that copy in place (the
// "transient" technique). So a batch of k writes costs O(k log n) and never
// copies the tree, and nodes of a published image, whose owner is done,
// never change again.
//
// iradix, which this replaces, allocates a channel per node and a byte key
// per entry; this costs a few words per entry.

// owner marks the nodes, vectors and lists one batch (or one restore) made
// and may still edit. It is never zero-sized, so every token is distinct.
type owner struct{ _ byte }

// ordered is a key that orders itself.
type ordered[K any] interface {
	compare(K) int
}

const (
	// bDegree: a node holds bDegree-1 to 2*bDegree-1 items, which keeps a
	// path copy small (a few hundred bytes a node) and the tree shallow.
	bDegree  = 16
	maxItems = 2*bDegree - 1
	minItems = bDegree - 1
)

type bitem[K ordered[K], V any] struct {
	key K
	val V
}

type bnode[K ordered[K], V any] struct {
	owner *owner
	items []bitem[K, V]
	kids  []*bnode[K, V] // nil in a leaf, else len(items)+1
}

// btree is a value: copying it (as Image.clone does) shares every node.
type btree[K ordered[K], V any] struct {
	root *bnode[K, V]
	n    int
}

// Len is the number of keys.
func (t *btree[K, V]) Len() int { return t.n }

// find returns the index of the first item whose key is >= k, and whether
// it equals k.
func (n *bnode[K, V]) find(k K) (int, bool) {
	lo, hi := 0, len(n.items)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if n.items[m].key.compare(k) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(n.items) && n.items[lo].key.compare(k) == 0
}

func (t *btree[K, V]) get(k K) (V, bool) {
	for n := t.root; n != nil; {
		i, found := n.find(k)
		if found {
			return n.items[i].val, true
		}
		if n.kids == nil {
			break
		}
		n = n.kids[i]
	}
	var zero V
	return zero, false
}

// mutable returns n if own owns it, else an owned copy with fresh arrays
// (never sharing a backing array with n, which may be published).
func (n *bnode[K, V]) mutable(own *owner) *bnode[K, V] {
	if n.owner == own {
		return n
	}
	c := &bnode[K, V]{owner: own, items: make([]bitem[K, V], len(n.items), maxItems)}
	copy(c.items, n.items)
	if n.kids != nil {
		c.kids = make([]*bnode[K, V], len(n.kids), maxItems+1)
		copy(c.kids, n.kids)
	}
	return c
}

func (n *bnode[K, V]) mutableKid(i int, own *owner) *bnode[K, V] {
	k := n.kids[i].mutable(own)
	n.kids[i] = k
	return k
}

// set inserts or replaces k's value.
func (t *btree[K, V]) set(own *owner, k K, v V) {
	if t.root == nil {
		t.root = &bnode[K, V]{owner: own, items: make([]bitem[K, V], 0, maxItems)}
	}
	t.root = t.root.mutable(own)
	if len(t.root.items) >= maxItems {
		mid, right := t.root.split(maxItems/2, own)
		root := &bnode[K, V]{owner: own, items: make([]bitem[K, V], 1, maxItems), kids: make([]*bnode[K, V], 2, maxItems+1)}
		root.items[0] = mid
		root.kids[0], root.kids[1] = t.root, right
		t.root = root
	}
	if t.root.insert(bitem[K, V]{k, v}, own) {
		t.n++
	}
}

// split moves the items after i (and their kids) to a new node, and returns
// item i and that node. n must be owned.
func (n *bnode[K, V]) split(i int, own *owner) (bitem[K, V], *bnode[K, V]) {
	mid := n.items[i]
	right := &bnode[K, V]{owner: own, items: make([]bitem[K, V], len(n.items)-i-1, maxItems)}
	copy(right.items, n.items[i+1:])
	clear(n.items[i:])
	n.items = n.items[:i]
	if n.kids != nil {
		right.kids = make([]*bnode[K, V], len(n.kids)-i-1, maxItems+1)
		copy(right.kids, n.kids[i+1:])
		clear(n.kids[i+1:])
		n.kids = n.kids[:i+1]
	}
	return mid, right
}

// insert puts it into the owned, non-full node n's subtree, splitting full
// kids on the way down. It reports whether the key is new.
func (n *bnode[K, V]) insert(it bitem[K, V], own *owner) bool {
	i, found := n.find(it.key)
	if found {
		n.items[i] = it
		return false
	}
	if n.kids == nil {
		n.items = append(n.items, bitem[K, V]{})
		copy(n.items[i+1:], n.items[i:])
		n.items[i] = it
		return true
	}
	if len(n.kids[i].items) >= maxItems {
		mid, right := n.mutableKid(i, own).split(maxItems/2, own)
		n.items = append(n.items, bitem[K, V]{})
		copy(n.items[i+1:], n.items[i:])
		n.items[i] = mid
		n.kids = append(n.kids, nil)
		copy(n.kids[i+2:], n.kids[i+1:])
		n.kids[i+1] = right
		switch c := it.key.compare(mid.key); {
		case c == 0:
			n.items[i] = it
			return false
		case c > 0:
			i++
		}
	}
	return n.mutableKid(i, own).insert(it, own)
}

// delete removes k, reporting whether it was there.
func (t *btree[K, V]) delete(own *owner, k K) bool {
	if t.root == nil {
		return false
	}
	if _, ok := t.get(k); !ok {
		return false // copy nothing for a missing key
	}
	t.root = t.root.mutable(own)
	t.root.remove(k, false, own)
	t.n--
	if len(t.root.items) == 0 {
		if t.root.kids == nil {
			t.root = nil
		} else {
			t.root = t.root.kids[0]
		}
	}
	return true
}

// remove deletes k (or, with max, the greatest item) from the owned node
// n's subtree and returns the item removed. The caller has made sure n has
// more than minItems items, or is the root.
func (n *bnode[K, V]) remove(k K, max bool, own *owner) bitem[K, V] {
	var i int
	var found bool
	if max {
		i = len(n.items)
		if n.kids == nil {
			i--
			found = true
		}
	} else {
		i, found = n.find(k)
	}
	if n.kids == nil {
		out := n.items[i]
		copy(n.items[i:], n.items[i+1:])
		n.items[len(n.items)-1] = bitem[K, V]{}
		n.items = n.items[:len(n.items)-1]
		return out
	}
	if len(n.kids[i].items) <= minItems {
		n.growKid(i, own)
		return n.remove(k, max, own)
	}
	kid := n.mutableKid(i, own)
	if found {
		// An inner item: its predecessor, the greatest of its left
		// subtree, takes its place.
		out := n.items[i]
		n.items[i] = kid.remove(k, true, own)
		return out
	}
	return kid.remove(k, max, own)
}

// growKid gives kid i more than minItems items, by taking one from a
// sibling through the separator, or by merging it with a sibling.
func (n *bnode[K, V]) growKid(i int, own *owner) {
	switch {
	case i > 0 && len(n.kids[i-1].items) > minItems:
		kid, left := n.mutableKid(i, own), n.mutableKid(i-1, own)
		kid.items = append(kid.items, bitem[K, V]{})
		copy(kid.items[1:], kid.items)
		kid.items[0] = n.items[i-1]
		n.items[i-1] = left.items[len(left.items)-1]
		left.items[len(left.items)-1] = bitem[K, V]{}
		left.items = left.items[:len(left.items)-1]
		if left.kids != nil {
			kid.kids = append(kid.kids, nil)
			copy(kid.kids[1:], kid.kids)
			kid.kids[0] = left.kids[len(left.kids)-1]
			left.kids[len(left.kids)-1] = nil
			left.kids = left.kids[:len(left.kids)-1]
		}
	case i < len(n.items) && len(n.kids[i+1].items) > minItems:
		kid, right := n.mutableKid(i, own), n.mutableKid(i+1, own)
		kid.items = append(kid.items, n.items[i])
		n.items[i] = right.items[0]
		copy(right.items, right.items[1:])
		right.items[len(right.items)-1] = bitem[K, V]{}
		right.items = right.items[:len(right.items)-1]
		if right.kids != nil {
			kid.kids = append(kid.kids, right.kids[0])
			copy(right.kids, right.kids[1:])
			right.kids[len(right.kids)-1] = nil
			right.kids = right.kids[:len(right.kids)-1]
		}
	default:
		// Both siblings are minimal: merge kid i with the one on its right
		// around their separator.
		if i >= len(n.items) {
			i--
		}
		kid, right := n.mutableKid(i, own), n.kids[i+1]
		kid.items = append(kid.items, n.items[i])
		kid.items = append(kid.items, right.items...)
		if kid.kids != nil {
			kid.kids = append(kid.kids, right.kids...)
		}
		copy(n.items[i:], n.items[i+1:])
		n.items[len(n.items)-1] = bitem[K, V]{}
		n.items = n.items[:len(n.items)-1]
		copy(n.kids[i+1:], n.kids[i+2:])
		n.kids[len(n.kids)-1] = nil
		n.kids = n.kids[:len(n.kids)-1]
	}
}

// each calls fn for every item in key order until fn returns false.
func (t *btree[K, V]) each(fn func(K, V) bool) {
	if t.root != nil {
		t.root.ascend(nil, fn)
	}
}

// ascendFrom calls fn for every item with a key >= from, in key order,
// until fn returns false.
func (t *btree[K, V]) ascendFrom(from K, fn func(K, V) bool) {
	if t.root != nil {
		t.root.ascend(&from, fn)
	}
}

func (n *bnode[K, V]) ascend(from *K, fn func(K, V) bool) bool {
	i := 0
	if from != nil {
		i, _ = n.find(*from)
	}
	for ; i < len(n.items); i++ {
		if n.kids != nil {
			if !n.kids[i].ascend(from, fn) {
				return false
			}
			from = nil // every later subtree lies above from
		}
		if !fn(n.items[i].key, n.items[i].val) {
			return false
		}
	}
	if n.kids != nil {
		return n.kids[len(n.items)].ascend(from, fn)
	}
	return true
}
