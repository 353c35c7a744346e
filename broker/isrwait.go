package broker

import (
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

const (
	// AlterPartitionTimeout bounds one AlterPartition of a partition leader,
	// retries across controllers included.
	AlterPartitionTimeout = 10 * time.Second
	// AlterPartitionRetryBackoff: after an AlterPartition that no controller
	// answered (it may or may not have been made) the leader decides again
	// this long after, unless the metadata shows the partition changed first.
	AlterPartitionRetryBackoff = time.Second
)

// ISRWait is what a partition leader waits for after an AlterPartition was
// answered, before it decides another ISR change: the metadata showing the
// partition at a partition epoch, or (when set) any metadata newer than the
// image the change was decided on, or (when set) a retry time. Every data
// plane that sends ISR changes through Link.AlterPartition waits the same
// way; WaitAfterAlterPartition makes one.
type ISRWait struct {
	minEpoch    int32
	anyOffset   bool
	afterOffset uint64
	retryAt     time.Time
}

// Lifted reports whether p, in img, at now, shows what w waits for.
func (w ISRWait) Lifted(p *fsm.Partition, img *fsm.Image, now time.Time) bool {
	return p.PartitionEpoch >= w.minEpoch ||
		(w.anyOffset && img.Offset > w.afterOffset) ||
		(!w.retryAt.IsZero() && !now.Before(w.retryAt))
}

// WaitAfterAlterPartition is the wait after change, decided on the image at
// offset sentAt, was answered desc, err by Link.AlterPartition: for the
// partition epoch the controller committed, or after a refusal for a newer
// partition state (or, for a refusal about brokers, any newer metadata; for
// no answer at all, AlterPartitionRetryBackoff). It logs the answer on log.
func WaitAfterAlterPartition(log *slog.Logger, change ISRChange, sentAt uint64, desc *keelpb.PartitionDescription, err error, now time.Time) ISRWait {
	w := ISRWait{minEpoch: change.PartitionEpoch + 1}
	reason, code := rpc.ReasonOf(err), status.Code(err)
	switch {
	case err == nil && desc.GetPartitionEpoch() > change.PartitionEpoch:
		w.minEpoch = desc.GetPartitionEpoch()
		log.Info("ISR changed", "committed_partition_epoch", desc.GetPartitionEpoch(), "isr", desc.GetIsr())
	case err == nil:
		// Accepted but nothing committed: the controller's partition is not
		// the one this decision was made on. Decide again on newer metadata.
		w.anyOffset, w.afterOffset = true, sentAt
		log.Warn("ISR change accepted without a new partition epoch; waiting for newer metadata",
			"committed_partition_epoch", desc.GetPartitionEpoch(), "isr", desc.GetIsr())
	case reason == rpc.ReasonFencedLeaderEpoch, reason == rpc.ReasonInvalidUpdateVersion, code == codes.NotFound:
		// The controller has a newer state of the partition than this
		// broker's image; it is on its way.
		log.Info("ISR change refused; waiting for the partition's newer state", "reason", reason, "err", status.Convert(err).Message())
	case code == codes.Unavailable, code == codes.DeadlineExceeded, code == codes.Canceled, reason == rpc.ReasonNotController:
		// No answer, or a controller behind this broker's metadata
		// (NOT_CONTROLLER): it may catch up with no newer metadata here.
		w.retryAt = now.Add(AlterPartitionRetryBackoff)
		log.Warn("ISR change not answered; deciding again shortly", "err", status.Convert(err).Message())
	default:
		// INELIGIBLE_REPLICA, STALE_BROKER_EPOCH, INVALID_REQUEST and the
		// like: the controller knows newer broker or partition states than
		// the image this decision was made on.
		w.anyOffset, w.afterOffset = true, sentAt
		log.Warn("ISR change refused; waiting for newer metadata", "reason", reason, "err", status.Convert(err).Message())
	}
	return w
}
