package replication

import (
	"testing"
	"time"

	"github.com/keel-dev/keel/broker/partlog"
	"github.com/keel-dev/keel/fsm"
)

// TestCleaner_ByCleanupPolicy: the cleaner cleans a compacted topic's
// logs, leader's and followers', below their high watermark, and leaves a
// delete topic's alone; retention (by retention.bytes here) deletes a
// compact,delete topic's old segments and leaves a compact topic's alone
// (Kafka's LogManager: only logs with delete in cleanup.policy are
// retained by time or size).
func TestCleaner_ByCleanupPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy              string
		wantClean, wantKept bool
	}{
		{"compact", true, true},
		{"compact,delete", true, false},
		{"delete", false, false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			e := newEnv(t, clusterImage(t, map[string]string{fsm.CleanupPolicy: tc.policy, fsm.RetentionBytes: "1"}, 1, 2, 3))
			// Small segments (segment.bytes is at least 1 MiB in a topic's
			// configs): every batch a segment of its own.
			for _, id := range []int32{1, 2, 3} {
				if err := e.replica(id).log.Reconfigure(partlog.Config{SegmentBytes: 100}); err != nil {
					t.Fatal(err)
				}
			}
			for range 5 {
				e.produce(1, 3)
				e.clock.Advance(2 * time.Millisecond)
			}
			for _, id := range []int32{2, 3} {
				e.catchUp(id)
			}
			// The followers learn the high watermark from their next fetch.
			for _, id := range []int32{2, 3} {
				e.catchUp(id)
			}
			for _, id := range []int32{1, 2, 3} {
				m, r := e.ms[id], e.replica(id)
				before := r.log.Size()
				if got := m.cleanDirtiest(); got != tc.wantClean {
					t.Fatalf("broker %d cleaned: %v, want %v", id, got, tc.wantClean)
				}
				if after := r.log.Size(); (after < before) != tc.wantClean {
					t.Fatalf("broker %d's log: %d bytes, %d before the clean", id, after, before)
				}
			}
			e.ms[1].retain()
			if kept := e.replica(1).log.LogStartOffset() == 0; kept != tc.wantKept {
				t.Fatalf("log start %d after retention: kept %v, want %v", e.replica(1).log.LogStartOffset(), kept, tc.wantKept)
			}
		})
	}
}
