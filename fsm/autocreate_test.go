package fsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

// TestFSM_AutoCreateConfigs: auto.create.topics.enable, num.partitions and
// default.replication.factor are broker configs, the cluster's only, from
// metadata.version 7 (AutoCreateMetadataVersion), with Kafka's defaults
// (KafkaConfig: true, 1, 1); below that level no topic is auto-created.
func TestFSM_AutoCreateConfigs(t *testing.T) {
	kafkaDefaults := AutoCreate{Enabled: true, Partitions: 1, ReplicationFactor: 1}
	tests := []struct {
		name    string
		level   uint32
		recs    []*keelpb.Record
		wantErr string
		want    AutoCreate
	}{
		{"Kafka's defaults", AutoCreateMetadataVersion, nil, "", kafkaDefaults},
		{"off below the level", ThrottleMetadataVersion, nil, "", AutoCreate{Partitions: 1, ReplicationFactor: 1}},
		{"turned off", AutoCreateMetadataVersion, []*keelpb.Record{configRec("", AutoCreateTopicsEnable, str("false"))}, "",
			AutoCreate{Partitions: 1, ReplicationFactor: 1}},
		{"counts set", AutoCreateMetadataVersion, []*keelpb.Record{configRec("", NumPartitions, str("6")),
			configRec("", DefaultReplicationFactor, str("3"))}, "", AutoCreate{Enabled: true, Partitions: 6, ReplicationFactor: 3}},
		{"set below the level", ThrottleMetadataVersion, []*keelpb.Record{configRec("", NumPartitions, str("6"))},
			"num.partitions needs metadata.version 7; the cluster is at 6", AutoCreate{Partitions: 1, ReplicationFactor: 1}},
		{"on a topic", AutoCreateMetadataVersion, []*keelpb.Record{configRec("a", AutoCreateTopicsEnable, str("false"))},
			"is a broker config", kafkaDefaults},
		{"in a new topic's configs", AutoCreateMetadataVersion,
			[]*keelpb.Record{topicRec("b", topicB, map[string]string{DefaultReplicationFactor: "2"})}, "is a broker config", kafkaDefaults},
		{"no partitions", AutoCreateMetadataVersion, []*keelpb.Record{configRec("", NumPartitions, str("0"))}, "outside [1,...]", kafkaDefaults},
		{"a replication factor over int16", AutoCreateMetadataVersion, []*keelpb.Record{configRec("", DefaultReplicationFactor, str("40000"))},
			"outside [1,32767]", kafkaDefaults},
		{"not a boolean", AutoCreateMetadataVersion, []*keelpb.Record{configRec("", AutoCreateTopicsEnable, str("yes"))},
			"is not a boolean", kafkaDefaults},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := withTopicsAt(t, tt.level)
			next, err := img, error(nil)
			if len(tt.recs) > 0 {
				next, err = Apply(img, img.Offset+1, 1, batch(tt.recs...))
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				next = img
			} else if err != nil {
				t.Fatal(err)
			}
			if got := next.AutoCreate(); got != tt.want {
				t.Fatalf("AutoCreate() = %+v, want %+v", got, tt.want)
			}
		})
	}
	// The level cannot go below 7 while one of them is set.
	img := apply1(t, withTopicsAt(t, AutoCreateMetadataVersion), configRec("", AutoCreateTopicsEnable, str("false")))
	if _, err := Apply(img, img.Offset+1, 1, batch(featureLevel(ThrottleMetadataVersion))); !errors.Is(err, ErrUnsafeDowngrade) {
		t.Fatalf("downgrade with auto.create.topics.enable set: %v", err)
	}
}
