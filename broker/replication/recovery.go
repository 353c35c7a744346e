package replication

import (
	"context"
	"slices"
	"time"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/rpc"
)

// Reporting logs to the controllers, for a partition whose metadata a
// restore rolled back (controller/recovery.go): a replica whose partition
// awaits its replicas' logs, or whose log holds a leader epoch above the
// metadata's, neither leads nor fetches (a fetch would truncate it to a
// leader that may lack acknowledged records) and is reported; the active
// controller then elects the replica whose log is furthest on, at an epoch
// above every log's.

const (
	// logReportInterval is how often the manager looks for replicas to
	// report, besides when a role change finds one.
	logReportInterval = 500 * time.Millisecond
	// logReportChunk bounds the reports sent in one request.
	logReportChunk = 5000
	// logReportTimeout bounds one request.
	logReportTimeout = 10 * time.Second
)

// logReport is the state of a partition a report was accepted for: a
// replica is reported again only when that changes (its leader epoch, this
// broker's epoch, or the active controller).
type logReport struct {
	leaderEpoch     int32
	brokerEpoch     int64
	controllerEpoch int64
}

// logReporter holds what the manager has reported; guarded by Manager.mu.
type logReporter struct {
	sent map[broker.TopicPartition]logReport
	kick chan struct{}
}

func newLogReporter() logReporter {
	return logReporter{sent: map[broker.TopicPartition]logReport{}, kick: make(chan struct{}, 1)}
}

// pokeReports makes the reporter look at once.
func (m *Manager) pokeReports() {
	select {
	case m.reports.kick <- struct{}{}:
	default:
	}
}

// logAhead reports whether r's log holds a leader epoch above epoch, and
// the highest it holds (-1 for none).
func logAhead(r *replica, epoch int32) (bool, int32) {
	last, _ := r.log.LatestEpoch()
	return broker.ReplicaLogAhead(last, epoch), last
}

// runLogReports reports, every logReportInterval and when poked, the logs
// to report that have not been reported in their present state, until
// Close.
func (m *Manager) runLogReports() {
	defer m.wg.Done()
	tick := time.NewTicker(logReportInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.reports.kick:
		case <-tick.C:
		}
		m.reportLogs(m.ctx)
	}
}

// reportLogs sends the reports due, in chunks; those the controller took
// are not sent again in the same state.
func (m *Manager) reportLogs(ctx context.Context) {
	img := m.img.Load()
	epoch := m.link.BrokerEpoch()
	if b, ok := img.Broker(m.self); epoch == 0 || !ok || b.Epoch != epoch {
		// Not registered yet, or the image has not reached this
		// registration: it may be another quorum's (a disaster recovery),
		// whose replicas this broker may still be writing to.
		return
	}
	key := func(p *fsm.Partition) logReport {
		return logReport{leaderEpoch: p.LeaderEpoch, brokerEpoch: epoch, controllerEpoch: img.ControllerEpoch}
	}
	var due []broker.ReplicaLog
	m.mu.Lock()
	for tp, r := range m.replicas {
		p, ok := img.Partition(tp.TopicID, tp.Partition)
		if !ok || !slices.Contains(p.Replicas, m.self) {
			delete(m.reports.sent, tp)
			continue
		}
		ahead, last := logAhead(r, p.LeaderEpoch)
		if !ahead && !p.AwaitsReplicaLogs() {
			delete(m.reports.sent, tp)
			continue
		}
		if sent, ok := m.reports.sent[tp]; ok && sent == key(p) {
			continue
		}
		due = append(due, broker.ReplicaLog{TopicID: tp.TopicID, Partition: tp.Partition, LeaderEpoch: p.LeaderEpoch,
			LastEpoch: last, EndOffset: r.log.LogEndOffset()})
	}
	m.mu.Unlock()
	for chunk := range slices.Chunk(due, logReportChunk) {
		rctx, cancel := context.WithTimeout(ctx, logReportTimeout)
		err := m.link.ReportReplicaLogs(rctx, chunk)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("cannot report replicas' logs to the controller; retrying", "replicas", len(chunk), "reason", rpc.ReasonOf(err), "err", err)
			}
			return
		}
		m.mu.Lock()
		for _, l := range chunk {
			tp := broker.TopicPartition{TopicID: l.TopicID, Partition: l.Partition}
			if p, ok := img.Partition(l.TopicID, l.Partition); ok {
				m.reports.sent[tp] = key(p)
			}
		}
		m.mu.Unlock()
		m.log.Info("reported replicas' logs to the controller", "replicas", len(chunk), "controller_epoch", img.ControllerEpoch)
	}
}
