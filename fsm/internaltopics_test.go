package fsm

import (
	"maps"
	"testing"
)

// TestInternalTopicConfigs: __consumer_offsets is compacted from
// CompactionMetadataVersion and keeps every record below it, and an
// acknowledged commit needs a majority of its replicas.
func TestInternalTopicConfigs(t *testing.T) {
	for _, tc := range []struct {
		level uint32
		rf    int32
		want  map[string]string
	}{
		{CompactionMetadataVersion, 3, map[string]string{SegmentBytes: "104857600", MinInsyncReplicas: "2", CleanupPolicy: "compact"}},
		{CompactionMetadataVersion, 5, map[string]string{SegmentBytes: "104857600", MinInsyncReplicas: "3", CleanupPolicy: "compact"}},
		{CompactionMetadataVersion, 1, map[string]string{SegmentBytes: "104857600", MinInsyncReplicas: "1", CleanupPolicy: "compact"}},
		{CompactionMetadataVersion - 1, 3, map[string]string{SegmentBytes: "104857600", MinInsyncReplicas: "2", RetentionMs: "-1"}},
	} {
		if got := InternalTopicConfigs(tc.level, tc.rf); !maps.Equal(got, tc.want) {
			t.Errorf("InternalTopicConfigs(%d, %d) = %v, want %v", tc.level, tc.rf, got, tc.want)
		}
	}
}
