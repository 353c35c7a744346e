package broker

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// TestWaitAfterAlterPartition: what a partition leader waits for after each
// answer to an ISR change decided on the image at offset 10 with the
// partition at epoch 3, before it decides again. A wait must lift on what
// can end it (or the leader never asks again) and on nothing that cannot
// (or it sends the same refused change again and again).
func TestWaitAfterAlterPartition(t *testing.T) {
	const sentAt, epoch = 10, 3
	change := ISRChange{TopicID: topicT, LeaderEpoch: 1, PartitionEpoch: epoch, ISR: []int32{1, 2}}
	// A probe is the leader looking again: the partition at an epoch, in
	// an image at an offset, some time after the answer.
	type probe struct {
		epoch  int32
		offset uint64
		after  time.Duration
	}
	var (
		same           = probe{epoch, sentAt, 0}
		newerMetadata  = probe{epoch, sentAt + 1, 0}
		nextEpoch      = probe{epoch + 1, sentAt + 1, 0}
		committedEpoch = probe{epoch + 2, sentAt + 1, 0}
		backoffLater   = probe{epoch, sentAt, AlterPartitionRetryBackoff}
		muchLater      = probe{epoch, sentAt, time.Hour}
	)
	refused := func(code codes.Code, reason string) error { return rpc.WithReason(code, reason, "refused by the test") }
	tests := []struct {
		name         string
		desc         *keelpb.PartitionDescription
		err          error
		lifted, held []probe
	}{
		{name: "committed: the partition at the committed epoch, which the answer may beat the image to",
			desc:   &keelpb.PartitionDescription{PartitionEpoch: epoch + 2, Isr: []int32{1, 2}},
			lifted: []probe{committedEpoch}, held: []probe{same, newerMetadata, nextEpoch, muchLater}},
		{name: "accepted without a new partition epoch: any newer metadata",
			desc:   &keelpb.PartitionDescription{PartitionEpoch: epoch},
			lifted: []probe{newerMetadata}, held: []probe{same, muchLater}},
		{name: "stale partition epoch: the partition's newer state, never the same epochs again",
			err:    refused(codes.FailedPrecondition, rpc.ReasonInvalidUpdateVersion),
			lifted: []probe{nextEpoch}, held: []probe{same, newerMetadata, muchLater}},
		{name: "stale leader epoch: the new leadership",
			err:    refused(codes.FailedPrecondition, rpc.ReasonFencedLeaderEpoch),
			lifted: []probe{nextEpoch}, held: []probe{same, newerMetadata, muchLater}},
		{name: "the partition is gone: its removal",
			err:    status.Error(codes.NotFound, "no such partition"),
			lifted: []probe{nextEpoch}, held: []probe{same, newerMetadata, muchLater}},
		{name: "an ineligible replica: newer metadata, which shows its broker's state",
			err:    refused(codes.FailedPrecondition, rpc.ReasonIneligibleReplica),
			lifted: []probe{newerMetadata, nextEpoch}, held: []probe{same, muchLater}},
		{name: "a stale broker epoch: newer metadata",
			err:    refused(codes.FailedPrecondition, rpc.ReasonStaleBrokerEpoch),
			lifted: []probe{newerMetadata}, held: []probe{same, muchLater}},
		{name: "no answer: a pause, or the partition's newer state",
			err:    status.Error(codes.Unavailable, "no active controller"),
			lifted: []probe{backoffLater, nextEpoch}, held: []probe{same, newerMetadata, {epoch, sentAt, AlterPartitionRetryBackoff - time.Millisecond}}},
		{name: "no answer in time: a pause",
			err:    status.Error(codes.DeadlineExceeded, "deadline exceeded"),
			lifted: []probe{backoffLater}, held: []probe{same, newerMetadata}},
		{name: "a controller behind this broker's metadata: a pause, as it may catch up with nothing new here",
			err:    refused(codes.FailedPrecondition, rpc.ReasonNotController),
			lifted: []probe{backoffLater}, held: []probe{same, newerMetadata}},
		{name: "an error without a reason: newer metadata",
			err:    errors.New("broken"),
			lifted: []probe{newerMetadata}, held: []probe{same, muchLater}},
	}
	now := time.Unix(1000, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := WaitAfterAlterPartition(discardLogger(), change, sentAt, tt.desc, tt.err, now)
			lifted := func(pr probe) bool {
				return w.Lifted(&fsm.Partition{TopicID: topicT, PartitionEpoch: pr.epoch}, &fsm.Image{Offset: pr.offset}, now.Add(pr.after))
			}
			for _, pr := range tt.lifted {
				if !lifted(pr) {
					t.Errorf("still waiting at %+v", pr)
				}
			}
			for _, pr := range tt.held {
				if lifted(pr) {
					t.Errorf("stopped waiting at %+v", pr)
				}
			}
		})
	}
}
