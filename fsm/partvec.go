package fsm

// A topic's partitions are numbered densely 0..n-1 and only ever appended
// (or dropped with their topic), so they live in a persistent vector: a trie
// of 32-way nodes indexed by the partition number's 5-bit digits. The
// length is the topic's partition count, kept in the Topic, so the vector
// itself is just its root. Changing a partition copies the nodes on its path
// (at most four for a million partitions), once per batch: nodes the batch
// owns are edited in place. Cost per partition: one slot, 8 bytes, plus a
// thirty-second of a node.

const (
	vecBits  = 5
	vecWidth = 1 << vecBits
	vecMask  = vecWidth - 1
)

// vnode is a leaf (slots) or an inner node (kids); one type keeps the code
// simple, and inner nodes are a thirty-second of the leaves.
type vnode struct {
	owner *owner
	kids  *[vecWidth]*vnode
	slots [vecWidth]*Partition
}

// vecShift is the shift of the root's digit in a vector of n elements.
func vecShift(n int) uint {
	var s uint
	for c := vecWidth; c < n; c <<= vecBits {
		s += vecBits
	}
	return s
}

// vecGet returns element i of the vector of n elements at root; i must be
// in range.
func vecGet(root *vnode, n, i int) *Partition {
	node := root
	for s := vecShift(n); s > 0; s -= vecBits {
		node = node.kids[(i>>s)&vecMask]
	}
	return node.slots[i&vecMask]
}

func (v *vnode) mutable(own *owner) *vnode {
	if v.owner == own {
		return v
	}
	c := &vnode{owner: own, slots: v.slots}
	if v.kids != nil {
		k := *v.kids
		c.kids = &k
	}
	return c
}

// vecSet returns the root of the vector with element i of n set to p,
// copying what own does not own. With i == n it appends.
func vecSet(root *vnode, n, i int, p *Partition, own *owner) *vnode {
	shift := vecShift(max(n, i+1))
	switch {
	case root == nil:
		root = &vnode{owner: own}
		if shift > 0 {
			root.kids = new([vecWidth]*vnode)
		}
	case shift > vecShift(n):
		// The vector outgrows its root: the old root becomes the first kid.
		up := &vnode{owner: own, kids: new([vecWidth]*vnode)}
		up.kids[0] = root
		root = up
	default:
		root = root.mutable(own)
	}
	node := root
	for s := shift; s > 0; s -= vecBits {
		j := (i >> s) & vecMask
		kid := node.kids[j]
		if kid == nil {
			kid = &vnode{owner: own}
			if s > vecBits {
				kid.kids = new([vecWidth]*vnode)
			}
		} else {
			kid = kid.mutable(own)
		}
		node.kids[j] = kid
		node = kid
	}
	node.slots[i&vecMask] = p
	return root
}

// vecEach calls fn for the n elements in order, until fn returns false.
func vecEach(root *vnode, n int, fn func(*Partition) bool) bool {
	if n == 0 {
		return true
	}
	return root.each(vecShift(n), 0, n, fn)
}

// each visits the elements of the subtree at v, which holds indexes from
// base, below n.
func (v *vnode) each(shift uint, base, n int, fn func(*Partition) bool) bool {
	if shift == 0 {
		for _, p := range v.slots[:min(vecWidth, n-base)] {
			if !fn(p) {
				return false
			}
		}
		return true
	}
	for j, kid := range v.kids {
		b := base + j<<shift
		if b >= n {
			break
		}
		if !kid.each(shift-vecBits, b, n, fn) {
			return false
		}
	}
	return true
}
