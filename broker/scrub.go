package broker

import (
	"cmp"
	"context"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// LogScrubber is a DataPlane that verifies its logs on demand (keel broker
// scrub): the reference data plane's Manager.
type LogScrubber interface {
	// ScrubLogs reads every sealed segment of every log now and reports
	// each log, with the damage known from earlier scrubs and fetches.
	ScrubLogs(context.Context) ([]ScrubbedLog, error)
}

// ScrubbedLog is one replica's log as a scrub found it.
type ScrubbedLog struct {
	Topic     string
	TopicID   fsm.TopicID
	Partition int32
	Role      string
	// Segments and Bytes are what this scrub read.
	Segments int
	Bytes    int64
	// Damage is the last damage a scrub found in the log ("" if none) and
	// DamageOffset where the good log ends below it; Repaired once the log
	// was cut there, to fetch the rest from the leader again.
	Damage       string
	DamageOffset int64
	Repaired     bool
	// LeaderDamage is the last batch this replica, following, refused
	// from its leader as damaged ("" if none).
	LeaderDamage                 string
	LogStartOffset, LogEndOffset int64
}

// SortScrubbed sorts logs by topic name, then partition.
func SortScrubbed(logs []ScrubbedLog) {
	slices.SortFunc(logs, func(a, b ScrubbedLog) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
}

func (s brokerService) ScrubLogs(ctx context.Context, _ *keelpb.ScrubLogsRequest) (*keelpb.ScrubLogsResponse, error) {
	sc, ok := s.a.cfg.DataPlane.(LogScrubber)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "broker %d keeps no logs to scrub", s.a.cfg.BrokerID)
	}
	logs, err := sc.ScrubLogs(ctx)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	resp := &keelpb.ScrubLogsResponse{Logs: make([]*keelpb.ScrubbedLog, len(logs))}
	for i, l := range logs {
		resp.Logs[i] = &keelpb.ScrubbedLog{Topic: l.Topic, TopicId: l.TopicID.String(), Partition: l.Partition, Role: l.Role,
			Segments: int32(l.Segments), Bytes: l.Bytes, Damage: l.Damage, DamageOffset: l.DamageOffset, Repaired: l.Repaired,
			LeaderDamage: l.LeaderDamage, LogStartOffset: l.LogStartOffset, LogEndOffset: l.LogEndOffset}
	}
	return resp, nil
}
