package rpc

import (
	"fmt"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ReasonLoadingSnapshot: the controller is starting and restoring its
// snapshot; it answers nothing but its peers' start-up questions and
// health checks until it has. The ErrorInfo's metadata says how far
// (SnapshotLoadOf).
const ReasonLoadingSnapshot = "LOADING_SNAPSHOT"

const (
	snapshotReadKey = "snapshot_read_bytes"
	snapshotSizeKey = "snapshot_bytes"
)

// SnapshotLoad is how far a starting controller has read its snapshot.
type SnapshotLoad struct {
	Read, Size int64 // bytes; Size 0 when unknown
}

// Percent is Read of Size, from 0 to 100; 0 when Size is unknown. A read
// past Size (a newer snapshot than the one measured) shows 100.
func (l SnapshotLoad) Percent() int {
	if l.Size <= 0 {
		return 0
	}
	return int(min(100, l.Read*100/l.Size))
}

// String is how an operator reads it: "loading snapshot (42%)".
func (l SnapshotLoad) String() string {
	if l.Size <= 0 {
		return "loading snapshot"
	}
	return fmt.Sprintf("loading snapshot (%d%%)", l.Percent())
}

// LoadingSnapshot is a starting controller's refusal while it restores its
// snapshot (Unavailable, as any call to a starting controller), saying how
// far it has got, in its message and for SnapshotLoadOf.
func LoadingSnapshot(load SnapshotLoad) error {
	return withReasonMeta(codes.Unavailable, ReasonLoadingSnapshot, "the controller is starting: "+load.String(), map[string]string{
		snapshotReadKey: strconv.FormatInt(load.Read, 10),
		snapshotSizeKey: strconv.FormatInt(load.Size, 10),
	})
}

// SnapshotLoadOf reads a LoadingSnapshot refusal; ok is false for any
// other error.
func SnapshotLoadOf(err error) (load SnapshotLoad, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus {
		return SnapshotLoad{}, false
	}
	for _, d := range st.Details() {
		if info, isInfo := d.(*errdetails.ErrorInfo); isInfo && info.Domain == ErrorDomain && info.Reason == ReasonLoadingSnapshot {
			load.Read, _ = strconv.ParseInt(info.Metadata[snapshotReadKey], 10, 64)
			load.Size, _ = strconv.ParseInt(info.Metadata[snapshotSizeKey], 10, 64)
			return load, true
		}
	}
	return SnapshotLoad{}, false
}
