package replication

import (
	"context"
	"testing"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// A restore rolls the metadata back under the logs (recovery.go): the
// replicas whose log holds a leader epoch above the metadata's neither lead
// nor follow, and report their logs; once the controller elects above
// every log, the partition is led again with every record.

// reported returns the reports each broker has sent, and forgets them.
func (e *env) reported() map[int32][]broker.ReplicaLog {
	for _, m := range e.ms {
		m.reportLogs(context.Background())
	}
	e.ctl.mu.Lock()
	defer e.ctl.mu.Unlock()
	out := e.ctl.logs
	e.ctl.logs = nil
	return out
}

func (e *env) role(id int32) string {
	r := e.replica(id)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.role
}

// rollBack makes img the controller's image again, as a restore of a
// snapshot taken at img would.
func (e *env) rollBack(img *fsm.Image) {
	e.ctl.mu.Lock()
	// Offsets move on, as after a restore; the partition is as img has it.
	next, err := fsm.Apply(img, e.ctl.img.Offset+1, 1, &keelpb.RecordBatch{Records: []*keelpb.Record{{Record: &keelpb.Record_NoOp{NoOp: &keelpb.NoOpRecord{}}}}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.ctl.img = next
	e.ctl.mu.Unlock()
	e.publish()
}

func TestRecovery_LogAheadOfTheMetadataHoldsAndReports(t *testing.T) {
	saved := clusterImage(t, nil, 1, 2, 3)
	e := newEnv(t, saved)
	e.produce(1, 5) // leader epoch 0
	e.catchUp(2)
	e.catchUp(3)
	// The leader moves to broker 2 (epoch 1), which takes 5 more that
	// every replica holds.
	e.ctl.commit(changeRec(leaderID(2), nil))
	e.publish()
	e.produce(2, 5)
	e.catchUp(1)
	e.catchUp(3)

	// The metadata goes back to epoch 0, led by broker 1.
	e.rollBack(saved)
	for id := int32(1); id <= 3; id++ {
		if role, leo := e.role(id), e.leo(id); role != broker.RoleStopped || leo != 10 {
			t.Fatalf("broker %d after the roll back: %s with log end %d; want stopped, its 10 records kept", id, role, leo)
		}
	}
	reports := e.reported()
	for id := int32(1); id <= 3; id++ {
		got := reports[id]
		if len(got) != 1 || got[0].TopicID != topicT || got[0].LeaderEpoch != 0 || got[0].LastEpoch != 1 || got[0].EndOffset != 10 {
			t.Fatalf("broker %d reported %+v; want t-0 at leader epoch 0 with a log at epoch 1 ending at 10", id, got)
		}
	}
	if again := e.reported(); len(again) != 0 {
		t.Fatalf("reported again with nothing changed: %+v", again)
	}

	// The controller makes it await its logs (no leader, RECOVERING): each
	// replica reports at the new epoch.
	awaiting := changeRec(leaderID(fsm.NoLeader), nil)
	state := keelpb.LeaderRecoveryState_LEADER_RECOVERY_STATE_RECOVERING
	awaiting.GetPartitionChange().LeaderRecoveryState = &state
	e.ctl.commit(awaiting)
	e.publish()
	if got := e.reported(); len(got) != 3 || got[2][0].LeaderEpoch != 1 {
		t.Fatalf("reports of the awaiting partition: %+v; want one per replica at leader epoch 1", got)
	}
	// A new active controller (a new controller epoch) gets them again.
	e.ctl.commit(&keelpb.Record{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: 2, LeaderId: 2}}})
	e.publish()
	if got := e.reported(); len(got) != 3 {
		t.Fatalf("reports to a new active controller: %+v; want one per replica", got)
	}

	// It elects broker 3 above every log's epoch: the partition is led
	// again, the followers catch up without losing a record, and it takes
	// writes.
	e.ctl.commit(changeRec(leaderID(3), []int32{3}))
	e.publish()
	if p, _ := e.ctl.image().Partition(topicT, 0); p.LeaderEpoch != 2 || e.role(3) != broker.RoleLeader {
		t.Fatalf("after the election: leader epoch %d, broker 3 %s; want 2, leading", p.LeaderEpoch, e.role(3))
	}
	e.catchUp(1)
	e.catchUp(2)
	e.produce(3, 1)
	e.catchUp(1)
	e.catchUp(2)
	for id := int32(1); id <= 3; id++ {
		if leo := e.leo(id); leo != 11 {
			t.Fatalf("broker %d log end %d; want 11: the 10 records from before the roll back and 1 after", id, leo)
		}
	}
	if got := e.reported(); len(got) != 0 {
		t.Fatalf("reported a partition that is led again: %+v", got)
	}
}
