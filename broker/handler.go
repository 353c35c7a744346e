package broker

import (
	"log/slog"

	"github.com/keel-dev/keel/fsm"
)

// Handler is what a broker built on this package implements to act on the
// metadata it receives. The agent calls it after every batch it applies and
// after every snapshot it installs, in offset order, one call at a time
// (never concurrently), before the new image becomes Agent.Image and before
// the agent reports the new offset in a heartbeat. So once the controller
// learns that a broker has applied offset N, that broker's handler has seen N.
//
// A handler that blocks holds up the broker's metadata: the broker falls
// behind (and stays fenced) but nothing else breaks.
//
// More methods come with partitions (become leader, become follower, stop
// replica: the seeds' LeaderAndIsr and StopReplica). Embed NopHandler in your
// handler so that it keeps compiling, and keeps doing nothing for the new
// methods, when they are added.
type Handler interface {
	// MetadataChanged is called with the image before and after one applied
	// batch, or around an installed snapshot. Both images are immutable and
	// may be kept. after.Offset > before.Offset, except that a snapshot
	// installed to repair a divergence may go back.
	MetadataChanged(before, after *fsm.Image)
}

// NopHandler does nothing. Embed it in a Handler to implement only some
// methods.
type NopHandler struct{}

// MetadataChanged does nothing.
func (NopHandler) MetadataChanged(before, after *fsm.Image) {}

// LoggingHandler logs what changed for the brokers of the cluster: the
// reference broker's handler, and a starting point for writing one.
type LoggingHandler struct {
	NopHandler
	Logger *slog.Logger
}

// MetadataChanged logs each broker registered, fenced, unfenced or gone, and
// every batch at debug level.
func (h LoggingHandler) MetadataChanged(before, after *fsm.Image) {
	log := h.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Debug("metadata applied", "offset", after.Offset, "term", after.Term, "controller_epoch", after.ControllerEpoch)
	for _, b := range after.Brokers() {
		old, ok := before.Broker(b.ID)
		switch {
		case !ok || old.Epoch != b.Epoch:
			log.Info("broker registered", "id", b.ID, "epoch", b.Epoch, "address", b.Address, "rack", b.Rack, "state", b.State())
		case old.Fenced != b.Fenced:
			log.Info("broker "+b.State(), "id", b.ID, "epoch", b.Epoch)
		}
	}
	for _, b := range before.Brokers() {
		if _, ok := after.Broker(b.ID); !ok {
			log.Info("broker unregistered", "id", b.ID, "epoch", b.Epoch)
		}
	}
}
