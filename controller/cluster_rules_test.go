package controller

import (
	"errors"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

const (
	incA = "00000000-0000-0000-0000-00000000000a"
	incB = "00000000-0000-0000-0000-00000000000b"
)

func regRecord(id int32, inc string) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
		BrokerId: id, IncarnationId: inc, Address: "127.0.0.1:9201", MinMetadataVersion: 1, MaxMetadataVersion: 1}}}
}

// imageWith builds an image by applying each batch at indexes 1, 2, ...
func imageWith(t *testing.T, batches ...[]*keelpb.Record) *fsm.Image {
	t.Helper()
	img := fsm.Empty()
	for i, recs := range batches {
		var err error
		if img, err = fsm.Apply(img, uint64(i+1), 1, &keelpb.RecordBatch{Records: recs}); err != nil {
			t.Fatalf("batch %d: %v", i+1, err)
		}
	}
	return img
}

func clusterStart() []*keelpb.Record {
	return []*keelpb.Record{
		{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: "c1"}}},
		{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: 1}}},
		{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: 1, LeaderId: 1}}},
	}
}

func TestCluster_RegistrationRules(t *testing.T) {
	// Broker 1, incarnation A, registered at index 2.
	img := imageWith(t, clusterStart(), []*keelpb.Record{regRecord(1, incA)})
	req := func(id int32, inc, cluster string, lo, hi uint32) *keelpb.RegisterBrokerRequest {
		return &keelpb.RegisterBrokerRequest{BrokerId: id, IncarnationId: inc, Address: "127.0.0.1:9201", ClusterId: cluster,
			MinMetadataVersion: lo, MaxMetadataVersion: hi}
	}
	tests := []struct {
		name    string
		req     *keelpb.RegisterBrokerRequest
		alive   bool
		wantErr error
	}{
		{name: "new broker", req: req(2, incB, "c1", 1, 1)},
		{name: "new broker on its first start (no cluster id yet)", req: req(2, incB, "", 1, 1)},
		{name: "wrong cluster id", req: req(2, incB, "other", 1, 1), wantErr: ErrInconsistentClusterID},
		{name: "metadata version too new for the broker", req: req(2, incB, "c1", 2, 3), wantErr: ErrUnsupportedMetadataVersion},
		{name: "another incarnation while the old session lives", req: req(1, incB, "c1", 1, 1), alive: true, wantErr: ErrDuplicateRegistration},
		{name: "another incarnation after the old session expired (bounced)", req: req(1, incB, "c1", 1, 1), alive: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := registrationRecords(img, tt.req, func(*fsm.Broker) time.Duration {
				if tt.alive {
					return time.Second
				}
				return 0
			})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Replaying the decision gives a new, fenced registration at that index.
			next, err := fsm.Apply(img, 10, 1, &keelpb.RecordBatch{Records: recs})
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			b, _ := next.Broker(tt.req.BrokerId)
			if b.Epoch != 10 || !b.Fenced || b.IncarnationID != tt.req.IncarnationId {
				t.Fatalf("registered %+v", b)
			}
		})
	}
}

func TestCluster_HeartbeatRules(t *testing.T) {
	// Broker 1 (epoch 2) active; broker 2 (epoch 3) fenced.
	img := imageWith(t, clusterStart(), []*keelpb.Record{regRecord(1, incA)}, []*keelpb.Record{regRecord(2, incB)},
		[]*keelpb.Record{{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: 1, BrokerEpoch: 2}}}})
	tests := []struct {
		name       string
		req        *keelpb.BrokerHeartbeatRequest
		wantErr    error
		wantFenced map[int32]bool // broker states after replaying the records
		noRecords  bool
	}{
		{name: "active broker, nothing to change", req: &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: 2, MetadataOffset: 4}, noRecords: true},
		{name: "fenced broker not caught up stays fenced", req: &keelpb.BrokerHeartbeatRequest{BrokerId: 2, BrokerEpoch: 3, MetadataOffset: 2}, noRecords: true},
		{name: "fenced broker caught up is unfenced", req: &keelpb.BrokerHeartbeatRequest{BrokerId: 2, BrokerEpoch: 3, MetadataOffset: 3}, wantFenced: map[int32]bool{2: false}},
		{name: "caught up but wants to stay fenced", req: &keelpb.BrokerHeartbeatRequest{BrokerId: 2, BrokerEpoch: 3, MetadataOffset: 4, WantFence: true}, noRecords: true},
		{name: "fenced and asking to shut down: may go at once", req: &keelpb.BrokerHeartbeatRequest{BrokerId: 2, BrokerEpoch: 3, MetadataOffset: 4, WantShutdown: true}, noRecords: true},
		{name: "active broker leading nothing asks to shut down: fenced at once", req: &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: 2, MetadataOffset: 4, WantShutdown: true}, wantFenced: map[int32]bool{1: true}},
		{name: "active broker asks to be fenced", req: &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: 2, MetadataOffset: 4, WantFence: true}, wantFenced: map[int32]bool{1: true}},
		{name: "stale epoch", req: &keelpb.BrokerHeartbeatRequest{BrokerId: 1, BrokerEpoch: 1}, wantErr: ErrStaleBrokerEpoch},
		{name: "unknown broker", req: &keelpb.BrokerHeartbeatRequest{BrokerId: 7, BrokerEpoch: 1}, wantErr: ErrBrokerNotRegistered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := heartbeatRecords(img, tt.req)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.noRecords {
				if len(recs) != 0 {
					t.Fatalf("records = %v, want none", recs)
				}
				return
			}
			next, err := fsm.Apply(img, 10, 1, &keelpb.RecordBatch{Records: recs})
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			for id, fenced := range tt.wantFenced {
				if b, _ := next.Broker(id); b.Fenced != fenced {
					t.Fatalf("broker %d fenced = %v, want %v", id, b.Fenced, fenced)
				}
			}
		})
	}
}

func TestSessions(t *testing.T) {
	// The tracker takes the time from its caller: a plain value stands in
	// for the clock.
	now := time.Unix(1_700_000_000, 0)
	img := imageWith(t, clusterStart(), []*keelpb.Record{regRecord(1, incA)}, []*keelpb.Record{regRecord(2, incB)},
		[]*keelpb.Record{
			{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: 1, BrokerEpoch: 2}}},
			{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: 2, BrokerEpoch: 3}}},
		})
	s := newSessionTracker(9 * time.Second)
	if got := s.expired(img, now); len(got) != 2 {
		t.Fatalf("before any session every active broker is expired; got %d", len(got))
	}
	s.reset(img.Brokers(), now)
	if got := s.expired(img, now); len(got) != 0 {
		t.Fatalf("after reset: expired %v", got)
	}
	now = now.Add(5 * time.Second)
	s.touch(1, 2, now, 0, false)
	now = now.Add(5 * time.Second) // broker 2: 10s since reset; broker 1: 5s since touch
	got := s.expired(img, now)
	if len(got) != 1 || got[0].ID != 2 {
		t.Fatalf("expired = %v, want broker 2", got)
	}
	if !s.alive(1, 2, now) || s.alive(2, 3, now) || s.alive(1, 1, now) {
		t.Fatal("alive disagrees with the sessions")
	}
	s.forget(1)
	if s.alive(1, 2, now) {
		t.Fatal("a forgotten session is alive")
	}
}
