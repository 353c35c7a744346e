package fsm

import "unsafe"

// slab hands out the Partitions and replica arrays of Partition records from
// blocks, so that creating a topic or restoring a snapshot allocates per
// block, not per partition, and wastes no size-class rounding per object.
//
// Only new partitions come from here. A block lives while any of its
// partitions does, so a later change that replaces some of them keeps the
// block alive: that waste is bounded by what the block first held. Changed
// partitions are allocated one by one (applyPartitionChange), since their
// blocks would be kept alive by their unchanged siblings over and over.
type slab struct {
	parts []Partition
	ints  []int32
	// left is how many more partitions the batch will create, at least:
	// no block is larger than needed.
	left int
}

const (
	// partitionBlock Partitions fit the 8 KiB size class.
	partitionBlock = 8192 / int(unsafe.Sizeof(Partition{}))
	int32Block     = 1024
)

func (s *slab) partition() *Partition {
	if len(s.parts) == 0 {
		s.parts = make([]Partition, min(max(s.left, 1), partitionBlock))
	}
	p := &s.parts[0]
	s.parts = s.parts[1:]
	s.left--
	return p
}

// int32s returns a copy of src (nil if empty) whose capacity is its
// length, so that an append to it can never write into a neighbour.
func (s *slab) int32s(src []int32) []int32 {
	if len(src) == 0 {
		return nil
	}
	if len(s.ints) < len(src) {
		s.ints = make([]int32, max(min(4*max(s.left, 1), int32Block), len(src)))
	}
	out := s.ints[:len(src):len(src)]
	copy(out, src)
	s.ints = s.ints[len(src):]
	return out
}
