package fsm

import (
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

func featureLevel(level uint32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: MetadataVersionFeature, Level: level}}}
}

func register(id int32, incarnation string) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
		BrokerId: id, IncarnationId: incarnation, Address: "127.0.0.1:9201", Rack: "r1",
		MinMetadataVersion: 1, MaxMetadataVersion: 1,
	}}}
}

func fence(id int32, epoch int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_FenceBroker{FenceBroker: &keelpb.FenceBrokerRecord{BrokerId: id, BrokerEpoch: epoch}}}
}

func unfence(id int32, epoch int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: &keelpb.UnfenceBrokerRecord{BrokerId: id, BrokerEpoch: epoch}}}
}

func unregister(id int32, epoch int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_UnregisterBroker{UnregisterBroker: &keelpb.UnregisterBrokerRecord{BrokerId: id, BrokerEpoch: epoch}}}
}

// replay applies batches at indexes 1, 2, ... and fails the test on error.
func replay(t *testing.T, batches ...*keelpb.RecordBatch) *Image {
	t.Helper()
	img := Empty()
	for i, b := range batches {
		var err error
		if img, err = Apply(img, uint64(i+1), 1, b); err != nil {
			t.Fatalf("batch %d: %v", i+1, err)
		}
	}
	return img
}

func TestFSM_Brokers(t *testing.T) {
	// Broker 1 registered at index 2 (its epoch), active; broker 2 at index 3, fenced.
	base := func(t *testing.T) *Image {
		return replay(t, batch(clusterID("c"), featureLevel(1), epoch(1, 1)), batch(register(1, "a")), batch(register(2, "b")), batch(unfence(1, 2)))
	}
	tests := []struct {
		name    string
		batch   *keelpb.RecordBatch
		wantErr string
		check   func(t *testing.T, img *Image)
	}{
		{
			name:  "registration starts fenced with the record's index as epoch",
			batch: batch(register(3, "c")),
			check: func(t *testing.T, img *Image) {
				b, ok := img.Broker(3)
				if !ok || b.Epoch != 10 || !b.Fenced || b.State() != BrokerFenced || b.Rack != "r1" {
					t.Fatalf("broker 3 = %+v", b)
				}
			},
		},
		{
			name:  "re-registration is a new incarnation with a new epoch, fenced",
			batch: batch(register(1, "a2")),
			check: func(t *testing.T, img *Image) {
				b, _ := img.Broker(1)
				if b.Epoch != 10 || b.IncarnationID != "a2" || !b.Fenced {
					t.Fatalf("broker 1 = %+v", b)
				}
			},
		},
		{
			name:  "fence an active broker",
			batch: batch(fence(1, 2)),
			check: func(t *testing.T, img *Image) {
				if b, _ := img.Broker(1); !b.Fenced {
					t.Fatalf("broker 1 = %+v", b)
				}
			},
		},
		{
			name:  "unfence a fenced broker",
			batch: batch(unfence(2, 3)),
			check: func(t *testing.T, img *Image) {
				if b, _ := img.Broker(2); b.Fenced || b.State() != BrokerActive {
					t.Fatalf("broker 2 = %+v", b)
				}
			},
		},
		{
			name:  "unregister",
			batch: batch(unregister(2, 3)),
			check: func(t *testing.T, img *Image) {
				if _, ok := img.Broker(2); ok || img.BrokerCount() != 1 {
					t.Fatalf("broker 2 still registered: %v", img.Brokers())
				}
			},
		},
		{name: "fence with a stale epoch", batch: batch(fence(1, 1)), wantErr: "broker 1 epoch 1 is stale (current 2)"},
		{name: "fence a fenced broker", batch: batch(fence(2, 3)), wantErr: "already fenced"},
		{name: "unfence an active broker", batch: batch(unfence(1, 2)), wantErr: "is not fenced"},
		{name: "unfence an unknown broker", batch: batch(unfence(9, 2)), wantErr: "broker 9 is not registered"},
		{name: "unregister with a stale epoch", batch: batch(unregister(2, 2)), wantErr: "stale"},
		{name: "negative broker id", batch: batch(register(-1, "x")), wantErr: "broker_id -1 is negative"},
		{name: "no incarnation", batch: batch(register(4, "")), wantErr: "incarnation_id is empty"},
		{
			name: "unsupported metadata version",
			batch: batch(&keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
				BrokerId: 4, IncarnationId: "x", Address: "h:1", MinMetadataVersion: 2, MaxMetadataVersion: 3}}}),
			wantErr: "broker supports metadata versions 2-3, the cluster is at 1",
		},
		{
			name: "epoch set in a log record",
			batch: batch(&keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
				BrokerId: 4, IncarnationId: "x", Address: "h:1", MinMetadataVersion: 1, MaxMetadataVersion: 1, BrokerEpoch: 99}}}),
			wantErr: "broker_epoch is assigned by the log",
		},
		{name: "unknown feature", batch: batch(&keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: "x", Level: 1}}}), wantErr: `unknown feature "x"`},
		{name: "metadata version out of range", batch: batch(featureLevel(MaxMetadataVersion + 1)), wantErr: "outside the range this binary supports"},
		{name: "all or nothing across brokers", batch: batch(unfence(2, 3), fence(1, 99)), wantErr: "record 1 (fence_broker)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := base(t)
			before := imageBytes(t, start)
			got, err := Apply(start, 10, 2, tt.batch)
			if string(imageBytes(t, start)) != string(before) {
				t.Fatal("Apply modified the image it was given")
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, got)
		})
	}
}

func TestFSM_BrokersSurviveSnapshot(t *testing.T) {
	img := replay(t, batch(clusterID("c"), featureLevel(1), epoch(1, 1)), batch(register(1, "a")), batch(register(2, "b")), batch(unfence(2, 3)))
	var buf strings.Builder
	if err := WriteSnapshot(&buf, img); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSnapshot(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := got.Broker(1)
	b2, _ := got.Broker(2)
	if got.BrokerCount() != 2 || b1.Epoch != 2 || !b1.Fenced || b2.Epoch != 3 || b2.Fenced || got.MetadataVersion != 1 {
		t.Fatalf("restored brokers %+v %+v, metadata version %d", b1, b2, got.MetadataVersion)
	}
	if !sameImage(t, got, img) {
		t.Fatal("restored image differs")
	}
}

func producerIDs(broker int32, epoch, next int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_ProducerIds{ProducerIds: &keelpb.ProducerIdsRecord{
		BrokerId: broker, BrokerEpoch: epoch, NextProducerId: next}}}
}

func TestFSM_ProducerIds(t *testing.T) {
	// Broker 1 registered at index 2 (its epoch); 1000 ids handed out at index 3.
	base := func(t *testing.T) *Image {
		return replay(t, batch(clusterID("c"), featureLevel(1), epoch(1, 1)), batch(register(1, "a")), batch(producerIDs(1, 2, 1000)))
	}
	tests := []struct {
		name    string
		batch   *keelpb.RecordBatch
		wantErr string
		want    int64
	}{
		{name: "the next block", batch: batch(producerIDs(1, 2, 2000)), want: 2000},
		{name: "two blocks in one batch", batch: batch(producerIDs(1, 2, 2000), producerIDs(1, 2, 3000)), want: 3000},
		{name: "the same next id again", batch: batch(producerIDs(1, 2, 1000)), wantErr: "next producer id 1000 is not above the current 1000"},
		{name: "going back", batch: batch(producerIDs(1, 2, 500)), wantErr: "not above"},
		{name: "a stale broker epoch", batch: batch(producerIDs(1, 1, 2000)), wantErr: "broker 1 epoch 1 is stale"},
		{name: "an unknown broker", batch: batch(producerIDs(7, 2, 2000)), wantErr: "broker 7 is not registered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := base(t)
			got, err := Apply(start, 10, 2, tt.batch)
			if start.NextProducerID != 1000 {
				t.Fatalf("Apply modified the image it was given: next producer id %d", start.NextProducerID)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.NextProducerID != tt.want {
				t.Fatalf("next producer id %d, want %d", got.NextProducerID, tt.want)
			}
		})
	}
}

// TestSnapshot_KeepsProducerIdsAndKafkaAddresses: the next free producer id
// and each broker's Kafka listener survive a snapshot, so that a controller
// restored from one never hands out a block twice.
func TestSnapshot_KeepsProducerIdsAndKafkaAddresses(t *testing.T) {
	reg := register(1, "a")
	reg.GetBrokerRegistration().KafkaAddress = "127.0.0.1:9092"
	img := replay(t, batch(clusterID("c"), featureLevel(1), epoch(1, 1)), batch(reg), batch(producerIDs(1, 2, 3000)))
	var buf strings.Builder
	if err := WriteSnapshot(&buf, img); err != nil {
		t.Fatal(err)
	}
	got, info, err := ReadSnapshotInfo(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := got.Broker(1)
	if got.NextProducerID != 3000 || b.KafkaAddress != "127.0.0.1:9092" || info.FormatVersion != SnapshotFormatVersion {
		t.Fatalf("restored next producer id %d, broker %+v, format %d", got.NextProducerID, b, info.FormatVersion)
	}
	if !sameImage(t, got, img) {
		t.Fatal("restored image differs")
	}
	// From the restored image the log goes on: the next block must be above.
	if _, err := Apply(got, img.Offset+1, 1, batch(producerIDs(1, 2, 3000))); err == nil {
		t.Fatal("a block overlapping the snapshot's was accepted")
	}
}
