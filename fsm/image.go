// Package fsm holds Keel's metadata image and the deterministic state machine
// that applies metadata records to it.
//
// The same code runs on every controller (fed by raft) and on every broker (fed
// by the controller's push stream), so that an image at offset N is the same
// everywhere. Nothing here reads the clock, draws random numbers, does I/O
// beyond the reader or writer it is handed, or depends on map order: whatever a
// record needs (times, ids) travels inside the record.
package fsm

// Image is one immutable version of the cluster metadata. Apply never modifies
// an image it was given; it returns a new one, so readers may hold an *Image
// for as long as they like without locks, and a snapshot is a pointer copy.
type Image struct {
	// ClusterID is set once by the first active controller and never changes.
	ClusterID string
	// ControllerEpoch is the epoch of the latest active controller; it only grows.
	ControllerEpoch int64
	// ControllerLeaderID is the node that committed ControllerEpoch.
	ControllerLeaderID int32

	// Offset and Term are the raft index and term of the last batch applied.
	Offset uint64
	Term   uint64
}

// Empty returns the image of a cluster before any record.
func Empty() *Image { return &Image{} }

// clone returns a shallow copy for a batch to edit. Every field is a value or
// (later) a persistent structure, so this stays O(1) whatever the image size.
func (img *Image) clone() *Image {
	c := *img
	return &c
}
