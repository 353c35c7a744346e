package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/partlog"
)

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// flipInBatch flips a byte in the records of the batch at index i of
// broker id's first segment of t-0 (inside its CRC), under the running
// manager, and returns that batch's base offset.
func (e *env) flipInBatch(id int32, i int) int64 {
	e.t.Helper()
	path := filepath.Join(e.dirs[id], logsDir, logDirName(broker.TopicPartition{TopicID: topicT}), "00000000000000000000.log")
	b, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	pos := 0
	for range i {
		pos += 12 + int(binary.BigEndian.Uint32(b[pos+8:]))
	}
	base := int64(binary.BigEndian.Uint64(b[pos:]))
	b[pos+70] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		e.t.Fatal(err)
	}
	return base
}

// TestFollower_RefusesDamagedBatchFromLeader: a follower appends its
// leader's answer up to a batch whose CRC-32C fails, refuses that batch and
// the rest, counts it once however often it fetches it again, and keeps
// what it refused for keel broker scrub.
func TestFollower_RefusesDamagedBatchFromLeader(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	for range 4 {
		e.produce(1, 2) // batches at 0, 2, 4, 6
	}
	damaged := e.flipInBatch(1, 2)
	for range 3 {
		err := e.fetch(2)
		if err == nil || !strings.Contains(err.Error(), "CRC-32C") {
			t.Fatalf("fetch of a damaged batch: %v, want a CRC-32C refusal", err)
		}
	}
	if got := e.leo(2); got != damaged {
		t.Fatalf("follower's log end %d, want %d: the batches before the damaged one, none from it on", got, damaged)
	}
	if n := counterValue(t, e.ms[2].scrubMetrics.damage.WithLabelValues(foundByFetch)); n != 1 {
		t.Fatalf("damage{found=fetch} = %v after three refusals of one batch, want 1", n)
	}
	logs, err := e.ms[2].ScrubLogs(context.Background())
	if err != nil || len(logs) != 1 || !strings.Contains(logs[0].LeaderDamage, "CRC-32C") {
		t.Fatalf("ScrubLogs of the follower: %+v, %v; want its leader's damage", logs, err)
	}
}

// TestScrub_DamageFound: what a scrub's damage does to a replica, by role.
// A follower cuts its log where the good log ends and fetches the rest
// again, until its log equals the leader's; a leader keeps its log and
// reports the damage; a damaged index is only reported.
func TestScrub_DamageFound(t *testing.T) {
	for _, tc := range []struct {
		name    string
		id      int32
		damage  partlog.Damage
		wantLEO int64 // before fetching again
	}{
		{"a follower's damaged batch", 2, partlog.Damage{File: "x.log", Offset: 4, Why: "CRC-32C"}, 4},
		{"a follower's wrong log start", 2, partlog.Damage{File: "log-start-offset-checkpoint", Offset: 0, Why: "log start"}, 0},
		{"a follower's damaged index", 2, partlog.Damage{File: "x.index", Offset: 4, Why: "index", Index: true}, 8},
		{"a leader's damaged batch", 1, partlog.Damage{File: "x.log", Offset: 4, Why: "CRC-32C"}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
			for range 4 {
				e.produce(1, 2)
			}
			e.catchUp(2)
			if tc.damage.Why == "log start" {
				// A log start inside the first segment, which this data
				// plane never moves it to: the scrub's damage says the
				// log is good below the segment's base, and the log is
				// emptied there.
				if err := e.replica(2).log.DeleteTo(4); err != nil {
					t.Fatal(err)
				}
			}
			m, r := e.ms[tc.id], e.replica(tc.id)
			m.damaged(r, &tc.damage)
			if got := e.leo(tc.id); got != tc.wantLEO {
				t.Fatalf("log end %d after the damage, want %d", got, tc.wantLEO)
			}
			if n := counterValue(t, m.scrubMetrics.damage.WithLabelValues(foundByScrub)); n != 1 {
				t.Fatalf("damage{found=scrub} = %v, want 1", n)
			}
			r.mu.Lock()
			repaired, hw := r.damage.repaired, r.hw
			r.mu.Unlock()
			cut := tc.wantLEO < 8
			if start := r.log.LogStartOffset(); start > tc.damage.Offset && cut {
				t.Fatalf("log start %d after the cut, want at most %d", start, tc.damage.Offset)
			}
			if repaired != cut || hw > r.log.LogEndOffset() {
				t.Fatalf("repaired %v, high watermark %d with log end %d; want repaired %v, the high watermark within the log", repaired, hw, r.log.LogEndOffset(), cut)
			}
			if tc.id != 1 {
				e.catchUp(tc.id)
				e.sameLogs(1, tc.id)
			}
		})
	}
}

// TestScrub_LeaderDamageCountedOnce: a leader's damage, found again at
// every pass, is counted and logged once.
func TestScrub_LeaderDamageCountedOnce(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1, 2, 3))
	e.produce(1, 2)
	m, r := e.ms[1], e.replica(1)
	for range 3 {
		m.damaged(r, &partlog.Damage{File: "x.log", Offset: 0, Why: "CRC-32C"})
	}
	if n := counterValue(t, m.scrubMetrics.damage.WithLabelValues(foundByScrub)); n != 1 {
		t.Fatalf("damage{found=scrub} = %v after three passes finding one damage, want 1", n)
	}
}

// TestFetch_LeaderNeverServesDamagedBatch: a consumer's fetch gets the
// batches before a damaged one; a fetch at the damaged one is
// KAFKA_STORAGE_ERROR, counted once.
func TestFetch_LeaderNeverServesDamagedBatch(t *testing.T) {
	e := newEnv(t, clusterImage(t, nil, 1))
	for range 4 {
		e.produce(1, 2) // batches at 0, 2, 4, 6; committed: the ISR is broker 1
	}
	damaged := e.flipInBatch(1, 2)
	res, err := e.ms[1].Fetch(context.Background(), "t", 0, -1, 0, 1<<20, 0)
	if err != nil || len(batchOffsets(res.Records)) != 2 {
		t.Fatalf("fetch at 0: %v batches, %v; want the two before the damaged one", batchOffsets(res.Records), err)
	}
	for range 2 {
		_, err = e.ms[1].Fetch(context.Background(), "t", 0, -1, damaged, 1<<20, 0)
		if !errors.Is(err, kerr.KafkaStorageError) || !strings.Contains(err.Error(), "CRC-32C") {
			t.Fatalf("fetch at the damaged batch: %v, want KAFKA_STORAGE_ERROR naming the CRC", err)
		}
	}
	if n := counterValue(t, e.ms[1].scrubMetrics.damage.WithLabelValues(foundByRead)); n != 1 {
		t.Fatalf("damage{found=read} = %v, want 1", n)
	}
}
