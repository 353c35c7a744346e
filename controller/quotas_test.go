package controller

import (
	"strings"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

func quotaEntry(e fsm.QuotaEntity, ops ...*keelpb.ClientQuotaOp) *keelpb.ClientQuotaAlteration {
	return &keelpb.ClientQuotaAlteration{Entity: e.Data(), Ops: ops}
}

func setQuota(key string, v float64) *keelpb.ClientQuotaOp {
	return &keelpb.ClientQuotaOp{Key: key, Value: v}
}
func removeQuota(key string) *keelpb.ClientQuotaOp {
	return &keelpb.ClientQuotaOp{Key: key, Remove: true}
}

// TestClientQuotaRecords: each entry is decided whole, in Kafka's way
// (ClientQuotaControlManagerTest): the records replay into the image
// the request asked for, and a bad entry writes nothing.
func TestClientQuotaRecords(t *testing.T) {
	alice := fsm.QuotaEntity{User: fsm.Named("alice")}
	app := fsm.QuotaEntity{ClientID: fsm.Named("app")}
	level := func(v uint32) *fsm.Image {
		img, err := fsm.Apply(fsm.Empty(), 1, 1, &keelpb.RecordBatch{Records: []*keelpb.Record{{Record: &keelpb.Record_FeatureLevel{
			FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: v}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	withAlice, _ := fsm.Apply(level(4), 2, 1, &keelpb.RecordBatch{Records: []*keelpb.Record{{Record: &keelpb.Record_ClientQuota{
		ClientQuota: &keelpb.ClientQuotaRecord{Entity: alice.Data(), Key: fsm.ProducerByteRate, Value: 1000}}}}})
	tests := []struct {
		name     string
		img      *fsm.Image
		entries  []*keelpb.ClientQuotaAlteration
		wantErrs []string
		records  int
		check    func(t *testing.T, img *fsm.Image)
	}{
		{name: "set two entities", img: level(4), entries: []*keelpb.ClientQuotaAlteration{
			quotaEntry(alice, setQuota(fsm.ProducerByteRate, 1024), setQuota(fsm.RequestPercentage, 50)),
			quotaEntry(app, setQuota(fsm.ConsumerByteRate, 2048))}, wantErrs: []string{"", ""}, records: 3,
			check: func(t *testing.T, img *fsm.Image) {
				if v, _ := img.ClientQuota(app, fsm.ConsumerByteRate); v != 2048 {
					t.Fatalf("app's consumer_byte_rate = %v", v)
				}
			}},
		{name: "the same value and removing an unset key write nothing", img: withAlice, entries: []*keelpb.ClientQuotaAlteration{
			quotaEntry(alice, setQuota(fsm.ProducerByteRate, 1000), removeQuota(fsm.ConsumerByteRate))}, wantErrs: []string{""}},
		{name: "remove", img: withAlice, entries: []*keelpb.ClientQuotaAlteration{quotaEntry(alice, removeQuota(fsm.ProducerByteRate))},
			wantErrs: []string{""}, records: 1,
			check: func(t *testing.T, img *fsm.Image) {
				if img.ClientQuotaCount() != 0 {
					t.Fatal("alice's quota is still there")
				}
			}},
		{name: "a bad entry writes nothing, the good one is written", img: level(4), entries: []*keelpb.ClientQuotaAlteration{
			quotaEntry(alice, setQuota(fsm.ProducerByteRate, 1024), setQuota("nope", 1)),
			quotaEntry(app, setQuota(fsm.ConsumerByteRate, 2048))}, wantErrs: []string{`unknown quota key "nope"`, ""}, records: 1,
			check: func(t *testing.T, img *fsm.Image) {
				if _, ok := img.ClientQuota(alice, fsm.ProducerByteRate); ok {
					t.Fatal("half of a bad entry was written")
				}
			}},
		{name: "an entry of no operations changes nothing, as in Kafka", img: level(4), entries: []*keelpb.ClientQuotaAlteration{quotaEntry(alice)},
			wantErrs: []string{""}},
		{name: "negative rate", img: level(4), entries: []*keelpb.ClientQuotaAlteration{quotaEntry(alice, setQuota(fsm.ConsumerByteRate, -1))},
			wantErrs: []string{"-1 is outside"}},
		{name: "key named twice", img: level(4), entries: []*keelpb.ClientQuotaAlteration{
			quotaEntry(alice, setQuota(fsm.ConsumerByteRate, 1), removeQuota(fsm.ConsumerByteRate))}, wantErrs: []string{"named twice"}},
		{name: "entity named by two entries", img: level(4), entries: []*keelpb.ClientQuotaAlteration{
			quotaEntry(alice, setQuota(fsm.ConsumerByteRate, 1)), quotaEntry(app, setQuota(fsm.ConsumerByteRate, 1)),
			quotaEntry(alice, setQuota(fsm.ProducerByteRate, 1))},
			wantErrs: []string{"more than one entry", "", "more than one entry"}, records: 1},
		{name: "below metadata.version 4", img: level(3), entries: []*keelpb.ClientQuotaAlteration{quotaEntry(alice, setQuota(fsm.ConsumerByteRate, 1))},
			wantErrs: []string{"client quotas need metadata.version 4; the cluster is at 3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, errs := clientQuotaRecords(tt.img, &keelpb.AlterClientQuotasRequest{Entries: tt.entries})
			if len(errs) != len(tt.wantErrs) {
				t.Fatalf("errs = %q", errs)
			}
			for i, want := range tt.wantErrs {
				if (want == "") != (errs[i] == "") || !strings.Contains(errs[i], want) {
					t.Errorf("entry %d: error %q; want %q", i, errs[i], want)
				}
			}
			if len(recs) != tt.records {
				t.Fatalf("%d records; want %d", len(recs), tt.records)
			}
			if len(recs) == 0 {
				return
			}
			next, err := fsm.Apply(tt.img, tt.img.Offset+1, 1, &keelpb.RecordBatch{Records: recs})
			if err != nil {
				t.Fatalf("the decision's records do not apply: %v", err)
			}
			if tt.check != nil {
				tt.check(t, next)
			}
		})
	}
}
