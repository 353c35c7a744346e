package fsm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/keel-dev/keel/proto/keelpb"
)

func registerRange(id int32, incarnation string, lo, hi uint32) *keelpb.Record {
	rec := register(id, incarnation)
	rec.GetBrokerRegistration().MinMetadataVersion, rec.GetBrokerRegistration().MaxMetadataVersion = lo, hi
	return rec
}

func controllerReg(id int32, lo, hi uint32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_ControllerRegistration{ControllerRegistration: &keelpb.ControllerRegistrationRecord{
		NodeId: id, Address: "127.0.0.1:9091", MinMetadataVersion: lo, MaxMetadataVersion: hi}}}
}

// TestMetadataVersions_EveryRecordHasALevel: every record type of the
// Record oneof is in exactly one level of the table, and RecordLevel gives
// that level; a new record type fails here until it is tied to a level.
func TestMetadataVersions_EveryRecordHasALevel(t *testing.T) {
	table := map[string]uint32{}
	for i, v := range MetadataVersions {
		if v.Level != uint32(i+1) {
			t.Fatalf("level %d is at position %d: the table must list 1, 2, ... in order", v.Level, i)
		}
		for _, r := range v.Records {
			if _, dup := table[r]; dup {
				t.Errorf("record %s is in two levels", r)
			}
			table[r] = v.Level
		}
	}
	if got := MetadataVersions[len(MetadataVersions)-1].Level; got != MaxMetadataVersion {
		t.Errorf("the table ends at level %d, MaxMetadataVersion is %d", got, MaxMetadataVersion)
	}
	oneof := (&keelpb.Record{}).ProtoReflect().Descriptor().Oneofs().ByName("record")
	for i := range oneof.Fields().Len() {
		fd := oneof.Fields().Get(i)
		rec := &keelpb.Record{}
		rec.ProtoReflect().Set(fd, protoreflect.ValueOfMessage(rec.ProtoReflect().NewField(fd).Message()))
		want, ok := table[string(fd.Name())]
		if !ok {
			t.Errorf("record %s is in no level of MetadataVersions", fd.Name())
			continue
		}
		if got := RecordLevel(rec); got != want {
			t.Errorf("RecordLevel(%s) = %d, the table says %d", fd.Name(), got, want)
		}
	}
}

// TestFSM_MetadataVersion follows Kafka's FeatureControlManagerTest: a
// level outside the binary's range, an upgrade a registered node does not
// support, an unsafe downgrade and a safe one; and the gate itself: a record
// above the finalized level is refused.
func TestFSM_MetadataVersion(t *testing.T) {
	atOne := func(brokers ...*keelpb.Record) []*keelpb.RecordBatch {
		return []*keelpb.RecordBatch{batch(clusterID("c"), featureLevel(1), epoch(1, 1)), batch(brokers...)}
	}
	tests := []struct {
		name    string
		log     []*keelpb.RecordBatch
		batch   *keelpb.RecordBatch
		wantErr error
		errText string
		check   func(t *testing.T, img *Image)
	}{
		{
			name: "a log without a level is at the bootstrap level", log: []*keelpb.RecordBatch{batch(clusterID("c"), epoch(1, 1))},
			batch: batch(register(1, "a")),
			check: func(t *testing.T, img *Image) {
				if img.MetadataVersion != 0 || img.FinalizedMetadataVersion() != BootstrapMetadataVersion {
					t.Fatalf("level %d, finalized %d", img.MetadataVersion, img.FinalizedMetadataVersion())
				}
			},
		},
		{
			name: "a log without a level refuses a level-2 record", log: []*keelpb.RecordBatch{batch(clusterID("c"), epoch(1, 1))},
			batch: batch(controllerReg(1, 1, 2)), wantErr: ErrAboveMetadataVersion, errText: "a controller_registration record needs metadata.version 2; the cluster is at 1",
		},
		{
			name: "testCannotUseInvalidVersion: above the binary", log: atOne(registerRange(1, "a", 1, 2)),
			batch: batch(featureLevel(MaxMetadataVersion + 1)), wantErr: ErrUnsupportedMetadataVersion, errText: "outside the range this binary supports",
		},
		{
			name: "testCannotUseInvalidVersion: level 0", log: atOne(registerRange(1, "a", 1, 2)),
			batch: batch(featureLevel(0)), wantErr: ErrUnsupportedMetadataVersion,
		},
		{
			name: "testUpdateFeaturesErrorCases: a registered broker does not support the level", log: atOne(registerRange(1, "a", 1, 2), registerRange(2, "b", 1, 1)),
			batch: batch(featureLevel(2)), wantErr: ErrUnsupportedMetadataVersion, errText: "broker 2 supports 1-1",
		},
		{
			name: "testUpdateFeatures: raise, then register a controller in the same batch", log: atOne(registerRange(1, "a", 1, 2)),
			batch: batch(featureLevel(2), controllerReg(1, 1, 2)),
			check: func(t *testing.T, img *Image) {
				if img.FinalizedMetadataVersion() != 2 || len(img.Controllers()) != 1 {
					t.Fatalf("level %d, controllers %v", img.FinalizedMetadataVersion(), img.Controllers())
				}
			},
		},
		{
			name: "a level-2 record before the raise", log: atOne(registerRange(1, "a", 1, 2)),
			batch: batch(controllerReg(1, 1, 2), featureLevel(2)), wantErr: ErrAboveMetadataVersion,
		},
		{
			name: "a broker that cannot read the level is not registered", log: append(atOne(registerRange(1, "a", 1, 2)), batch(featureLevel(2))),
			batch: batch(registerRange(2, "b", 1, 1)), wantErr: ErrUnsupportedMetadataVersion, errText: "broker supports metadata versions 1-1, the cluster is at 2",
		},
		{
			name: "a controller that cannot read the level is not registered", log: append(atOne(registerRange(1, "a", 1, 2)), batch(featureLevel(2))),
			batch: batch(controllerReg(2, 1, 1)), wantErr: ErrUnsupportedMetadataVersion, errText: "controller 2 supports metadata versions 1-1, the cluster is at 2",
		},
		{
			name:  "testCannotUnsafeDowngradeToLowerVersion: controller registrations would be dropped",
			log:   append(atOne(registerRange(1, "a", 1, 2)), batch(featureLevel(2), controllerReg(1, 1, 2))),
			batch: batch(featureLevel(1)), wantErr: ErrUnsafeDowngrade, errText: "1 controller registrations (metadata.version 2) would be dropped",
		},
		{
			name: "testCanUseSafeDowngradeIfMetadataDidNotChange", log: append(atOne(registerRange(1, "a", 1, 2)), batch(featureLevel(2))),
			batch: batch(featureLevel(1)),
			check: func(t *testing.T, img *Image) {
				if img.FinalizedMetadataVersion() != 1 {
					t.Fatalf("level %d, want 1", img.FinalizedMetadataVersion())
				}
			},
		},
		{
			name: "a controller registration with an empty range", log: append(atOne(registerRange(1, "a", 1, 2)), batch(featureLevel(2))),
			batch: batch(controllerReg(2, 2, 1)), errText: "metadata version range 2-1 is empty",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := replay(t, tt.log...)
			before := imageBytes(t, start)
			got, err := Apply(start, uint64(len(tt.log)+1), 1, tt.batch)
			if !bytes.Equal(imageBytes(t, start), before) {
				t.Fatal("Apply modified the image it was given")
			}
			if tt.wantErr != nil || tt.errText != "" {
				if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("err = %v, want %v containing %q", err, tt.wantErr, tt.errText)
				}
				if got != start {
					t.Fatal("a refused batch changed the image")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

// TestSnapshot_CarriesMetadataVersion: the level and the controller
// registrations survive a snapshot, the header states the level, and a
// snapshot above this binary's level is refused before its records, naming
// both.
func TestSnapshot_CarriesMetadataVersion(t *testing.T) {
	img := replay(t, batch(clusterID("c"), featureLevel(1), epoch(1, 1)), batch(registerRange(1, "a", 1, 2)),
		batch(featureLevel(2), controllerReg(1, 1, 2), controllerReg(3, 1, 2)))
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, img); err != nil {
		t.Fatal(err)
	}
	header, err := ReadSnapshotHeader(bytes.NewReader(buf.Bytes()))
	if err != nil || header.MetadataVersion != 2 {
		t.Fatalf("header %v, %v", header, err)
	}
	got, err := ReadSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got.MetadataVersion != 2 || !slices.EqualFunc(got.Controllers(), img.Controllers(), func(a, b *ControllerRegistration) bool { return *a == *b }) {
		t.Fatalf("restored level %d, controllers %v; want 2, %v", got.MetadataVersion, got.Controllers(), img.Controllers())
	}
	if !bytes.Equal(imageBytes(t, got), buf.Bytes()) {
		t.Fatal("the restored image writes another snapshot")
	}

	// A snapshot from a newer binary: only its header matters here.
	var newer bytes.Buffer
	bw := bufio.NewWriter(&newer)
	bw.WriteString(snapshotMagic)
	if err := (&frameWriter{w: bw}).frame(frameHeader, &keelpb.SnapshotHeader{FormatVersion: SnapshotFormatVersion, MetadataVersion: MaxMetadataVersion + 1}); err != nil {
		t.Fatal(err)
	}
	bw.Flush()
	_, err = ReadSnapshot(bytes.NewReader(newer.Bytes()))
	if !errors.Is(err, ErrUnsupportedMetadataVersion) || errors.Is(err, ErrCorruptSnapshot) ||
		!strings.Contains(err.Error(), fmt.Sprintf("the snapshot is at metadata.version %d; this binary supports 1-%d", MaxMetadataVersion+1, MaxMetadataVersion)) {
		t.Fatalf("err = %v", err)
	}
	if _, err := VerifySnapshot(bytes.NewReader(newer.Bytes())); !errors.Is(err, ErrUnsupportedMetadataVersion) {
		t.Fatalf("VerifySnapshot: err = %v", err)
	}
}
