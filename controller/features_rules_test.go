package controller

import (
	"errors"
	"strings"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

func levelRecord(level uint32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: level}}}
}

func regRange(id int32, lo, hi uint32) *keelpb.Record {
	rec := regRecord(id, incA)
	rec.GetBrokerRegistration().MinMetadataVersion, rec.GetBrokerRegistration().MaxMetadataVersion = lo, hi
	return rec
}

// TestFeatureControl_UpdateFeatures ports the rules of Kafka's
// FeatureControlManagerTest (testUpdateFeatures,
// testUpdateFeaturesErrorCases, testCannotDowngradeToHigherVersion,
// testCannotUnsafeDowngradeToLowerVersion,
// testCanUseSafeDowngradeIfMetadataDidNotChange) to Keel's
// featureLevelRecords: every decision it makes applies, and every refusal
// says why.
func TestFeatureControl_UpdateFeatures(t *testing.T) {
	atOne := func(t *testing.T, brokers ...*keelpb.Record) *fsm.Image {
		if len(brokers) == 0 {
			return imageWith(t, clusterStart())
		}
		return imageWith(t, clusterStart(), brokers)
	}
	atTwo := func(t *testing.T, extra ...*keelpb.Record) *fsm.Image {
		return imageWith(t, clusterStart(), []*keelpb.Record{regRange(1, 1, 2)}, append([]*keelpb.Record{levelRecord(2)}, extra...))
	}
	ctrlReg := &keelpb.Record{Record: &keelpb.Record_ControllerRegistration{ControllerRegistration: &keelpb.ControllerRegistrationRecord{
		NodeId: 1, Address: "127.0.0.1:9091", MinMetadataVersion: 1, MaxMetadataVersion: 2}}}
	tests := []struct {
		name      string
		img       func(t *testing.T) *fsm.Image
		level     uint32
		downgrade bool
		wantErr   error
		errText   string
		wantLevel uint32 // 0: nothing written
	}{
		{name: "testUpdateFeatures: raise", img: func(t *testing.T) *fsm.Image { return atOne(t, regRange(1, 1, 2)) }, level: 2, wantLevel: 2},
		{name: "the same level writes nothing", img: func(t *testing.T) *fsm.Image { return atOne(t, regRange(1, 1, 2)) }, level: 1},
		{
			name: "testUpdateFeaturesErrorCases: a broker does not support the level", img: func(t *testing.T) *fsm.Image { return atOne(t, regRange(1, 1, 2), regRange(2, 1, 1)) },
			level: 2, wantErr: ErrUnsupportedMetadataVersion, errText: "metadata.version cannot move from 1 to 2: broker 2 supports 1-1",
		},
		{
			name: "above the binary", img: func(t *testing.T) *fsm.Image { return atOne(t, regRange(1, 1, 2)) },
			level: fsm.MaxMetadataVersion + 1, wantErr: ErrUnsupportedMetadataVersion, errText: "this binary supports",
		},
		{
			name: "testCannotDowngradeToHigherVersion", img: func(t *testing.T) *fsm.Image { return atOne(t) },
			level: 2, downgrade: true, errText: "that is an upgrade, not a downgrade",
		},
		{
			name: "a lower level without downgrade", img: func(t *testing.T) *fsm.Image { return atTwo(t) },
			level: 1, errText: "lowering the level is a downgrade",
		},
		{
			name: "testCannotUnsafeDowngradeToLowerVersion", img: func(t *testing.T) *fsm.Image { return atTwo(t, ctrlReg) },
			level: 1, downgrade: true, wantErr: ErrUnsafeDowngrade, errText: "1 controller registrations (metadata.version 2) would be dropped",
		},
		{
			name: "testCanUseSafeDowngradeIfMetadataDidNotChange", img: func(t *testing.T) *fsm.Image { return atTwo(t) },
			level: 1, downgrade: true, wantLevel: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := tt.img(t)
			recs, err := featureLevelRecords(img, tt.level, tt.downgrade)
			if tt.wantErr != nil || tt.errText != "" {
				if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("err = %v, want %v containing %q", err, tt.wantErr, tt.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantLevel == 0 {
				if len(recs) != 0 {
					t.Fatalf("records %v, want none", recs)
				}
				return
			}
			next, err := fsm.Apply(img, img.Offset+1, 1, &keelpb.RecordBatch{Records: recs})
			if err != nil {
				t.Fatalf("the decision does not apply: %v", err)
			}
			if next.FinalizedMetadataVersion() != tt.wantLevel {
				t.Fatalf("level %d, want %d", next.FinalizedMetadataVersion(), tt.wantLevel)
			}
		})
	}
}

// TestFeatureControl_ControllerRegistrations: registrations are written
// only from level 2, only for voters that answered and can read the level,
// and only when they changed.
func TestFeatureControl_ControllerRegistrations(t *testing.T) {
	voters := []FeatureNode{
		{Kind: "controller", ID: 1, Address: "h:1", Min: 1, Max: 2},
		{Kind: "controller", ID: 2, Address: "h:2", Err: "connection refused"},
		{Kind: "controller", ID: 3, Address: "h:3", Min: 1, Max: 1},
	}
	atOne := imageWith(t, clusterStart())
	if recs, skipped := controllerRegistrationRecords(atOne, voters); len(recs) != 0 || len(skipped) != 0 {
		t.Fatalf("at level 1: records %v, skipped %v; want none", recs, skipped)
	}
	atTwo := imageWith(t, clusterStart(), []*keelpb.Record{levelRecord(2)})
	recs, skipped := controllerRegistrationRecords(atTwo, voters)
	if len(recs) != 1 || recs[0].GetControllerRegistration().GetNodeId() != 1 {
		t.Fatalf("records %v, want controller 1's only", recs)
	}
	if len(skipped) != 1 || !strings.Contains(skipped[0], "controller 3 supports 1-1, the cluster is at 2") {
		t.Fatalf("skipped %v", skipped)
	}
	next, err := fsm.Apply(atTwo, atTwo.Offset+1, 1, &keelpb.RecordBatch{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := controllerRegistrationRecords(next, voters); len(again) != 0 {
		t.Fatalf("an unchanged registration is written again: %v", again)
	}
	voters[0].Address = "h:11"
	if again, _ := controllerRegistrationRecords(next, voters); len(again) != 1 {
		t.Fatalf("a changed address is not written: %v", again)
	}
}

// TestFeatureControl_LevelChangeRecords: the decision of a change of level
// writes nothing when the level does not change (even with a voter's
// registration out of date: registerControllers keeps those), no
// registrations below level 2, and is refused whole when the FeatureLevel
// record is. (A registration refreshed ahead of the FeatureLevel record
// matters from a level 3 on, which no binary has yet: then a controller
// upgraded a moment ago is checked by the range it answers now.)
func TestFeatureControl_LevelChangeRecords(t *testing.T) {
	reg := &keelpb.Record{Record: &keelpb.Record_ControllerRegistration{ControllerRegistration: &keelpb.ControllerRegistrationRecord{
		NodeId: 1, Address: "h:1", MinMetadataVersion: 1, MaxMetadataVersion: 2}}}
	atTwo := imageWith(t, clusterStart(), []*keelpb.Record{regRange(1, 1, 2)}, []*keelpb.Record{levelRecord(2), reg})
	moved := []FeatureNode{{Kind: "controller", ID: 1, Address: "h:2", Min: 1, Max: 2}}
	if recs, err := levelChangeRecords(atTwo, 2, false, moved); err != nil || len(recs) != 0 {
		t.Fatalf("the same level: records %v, err %v; want none", recs, err)
	}
	if recs, err := levelChangeRecords(atTwo, 1, true, moved); !errors.Is(err, ErrUnsafeDowngrade) || len(recs) != 0 {
		t.Fatalf("a downgrade with registrations: records %v, err %v; want ErrUnsafeDowngrade and none", recs, err)
	}
	atOne := imageWith(t, clusterStart(), []*keelpb.Record{regRange(1, 1, 2)})
	recs, err := levelChangeRecords(atOne, 2, false, moved)
	if err != nil || len(recs) != 1 || recs[0].GetFeatureLevel().GetLevel() != 2 {
		t.Fatalf("a raise from 1: records %v, err %v; want the FeatureLevel record alone", recs, err)
	}
}
