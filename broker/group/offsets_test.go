package group

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A member's commit is checked against its generation; an admin's
// (generation -1, no member) only while the group is Empty or unknown,
// as Kafka's handleCommitOffsets.
func TestOffsetCommit_Checks(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  func(h *harness) *kmsg.OffsetCommitRequest
		want int16
	}{
		{"testCommitOffsetFromUnknownGroup", func(*harness) *kmsg.OffsetCommitRequest {
			return commitReq("g", "m", 1, "t", map[int32]int64{0: 5})
		}, kerr.IllegalGeneration.Code},
		{"testBasicFetchTxnOffsets (simple commit, unknown group)", func(*harness) *kmsg.OffsetCommitRequest {
			return commitReq("g", "", -1, "t", map[int32]int64{0: 5})
		}, 0},
		{"testCommitOffsetInCompletingRebalance", func(h *harness) *kmsg.OffsetCommitRequest {
			id := h.memberID("g")
			join := h.joinAll("g", joinReq("g", id))[0]
			return commitReq("g", id, join.Generation, "t", map[int32]int64{0: 5})
		}, kerr.RebalanceInProgress.Code},
		{"testCommitOffsetsAfterGroupIsEmpty (admin commit refused while members)", func(h *harness) *kmsg.OffsetCommitRequest {
			h.stable("g")
			return commitReq("g", "", -1, "t", map[int32]int64{0: 5})
		}, kerr.UnknownMemberID.Code},
		{"testCommitOffsetWithDefaultGeneration", func(h *harness) *kmsg.OffsetCommitRequest {
			id, gen := h.stable("g")
			return commitReq("g", id, gen+1, "t", map[int32]int64{0: 5})
		}, kerr.IllegalGeneration.Code},
		{"testCommitOffsetUnknownMemberId", func(h *harness) *kmsg.OffsetCommitRequest {
			_, gen := h.stable("g")
			return commitReq("g", "other", gen, "t", map[int32]int64{0: 5})
		}, kerr.UnknownMemberID.Code},
		{"testValidCommitOffset", func(h *harness) *kmsg.OffsetCommitRequest {
			id, gen := h.stable("g")
			return commitReq("g", id, gen, "t", map[int32]int64{0: 5})
		}, 0},
		{"testCommitOffsetInEmptyGroup (member commit)", func(h *harness) *kmsg.OffsetCommitRequest {
			h.c.OffsetCommit(h.ctx, commitReq("g", "", -1, "t", map[int32]int64{0: 1}))
			return commitReq("g", "m", 0, "t", map[int32]int64{0: 5})
		}, kerr.UnknownMemberID.Code},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			codes := commitCodes(h.c.OffsetCommit(h.ctx, tc.req(h)))
			if codes[0] != tc.want {
				t.Fatalf("code %d, want %d", codes[0], tc.want)
			}
			got, code := h.fetched("g", "t", 0)
			want := int64(-1)
			if tc.want == 0 {
				want = 5
			}
			if code != 0 || got[0] != want && !(tc.want != 0 && got[0] == 1) {
				t.Fatalf("fetched %v (code %d), want %d", got, code, want)
			}
		})
	}
}

func TestOffsetCommit_MetadataTooLarge(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.OffsetMetadataMaxBytes = 4 })
	r := commitReq("g", "", -1, "t", map[int32]int64{0: 5, 1: 6})
	r.Topics[0].Partitions[1].Metadata = kmsg.StringPtr("12345")
	codes := commitCodes(h.c.OffsetCommit(h.ctx, r))
	if codes[0] != 0 || codes[1] != kerr.OffsetMetadataTooLarge.Code {
		t.Fatalf("codes %v", codes)
	}
	if got, _ := h.fetched("g", "t", 0, 1); got[0] != 5 || got[1] != -1 {
		t.Fatalf("fetched %v", got)
	}
}

// A failed append leaves nothing half-applied: the commit is answered the
// mapped error and OffsetFetch still sees the offsets before it.
func TestOffsetCommit_AppendErrorChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int16
	}{
		{kerr.NotLeaderForPartition, kerr.NotCoordinator.Code},
		{kerr.NotEnoughReplicas, kerr.CoordinatorNotAvailable.Code},
		{kerr.NotEnoughReplicasAfterAppend, kerr.CoordinatorNotAvailable.Code},
		{fmt.Errorf("replication: %w", kerr.RequestTimedOut), kerr.CoordinatorNotAvailable.Code},
		{kerr.UnknownTopicOrPartition, kerr.CoordinatorNotAvailable.Code},
		{kerr.MessageTooLarge, kerr.InvalidCommitOffsetSize.Code},
		{kerr.RecordListTooLarge, kerr.InvalidCommitOffsetSize.Code},
		{errors.New("disk on fire"), kerr.UnknownServerError.Code},
	} {
		t.Run(tc.err.Error(), func(t *testing.T) {
			h := newHarness(t, nil)
			id, gen := h.stable("g")
			if codes := commitCodes(h.c.OffsetCommit(h.ctx, commitReq("g", id, gen, "t", map[int32]int64{0: 5}))); codes[0] != 0 {
				t.Fatalf("first commit: %v", codes)
			}
			h.log.failAppends(tc.err)
			if codes := commitCodes(h.c.OffsetCommit(h.ctx, commitReq("g", id, gen, "t", map[int32]int64{0: 9, 1: 9}))); codes[0] != tc.want || codes[1] != tc.want {
				t.Fatalf("codes %v, want %d", codes, tc.want)
			}
			if got, _ := h.fetched("g", "t", 0, 1); got[0] != 5 || got[1] != -1 {
				t.Fatalf("fetched %v after a failed commit", got)
			}
		})
	}
}

func TestAppendCode_GroupMetadata(t *testing.T) {
	if got := appendCode(kerr.MessageTooLarge, false); got != kerr.UnknownServerError.Code {
		t.Fatalf("MessageTooLarge for group metadata: %d", got)
	}
	if got := appendCode(kerr.KafkaStorageError, false); got != kerr.NotCoordinator.Code {
		t.Fatalf("KafkaStorageError: %d", got)
	}
	if got := appendCode(kerr.InvalidRecord, true); got != kerr.InvalidRecord.Code {
		t.Fatalf("another Kafka error: %d", got)
	}
}

// A failed SyncGroup write answers the members its error and rebalances.
func TestSyncGroup_AppendErrorRebalances(t *testing.T) {
	h := newHarness(t, nil)
	id := h.memberID("g")
	join := h.joinAll("g", joinReq("g", id))[0]
	h.log.failAppends(kerr.NotEnoughReplicas)
	sync := h.c.SyncGroup(h.ctx, syncReq("g", id, join.Generation, map[string]string{id: "a"}))
	if sync.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("sync: code %d", sync.ErrorCode)
	}
	if s := h.state("g"); s != statePreparingRebalance {
		t.Fatalf("state %v", s)
	}
}

func TestOffsetFetch(t *testing.T) {
	h := newHarness(t, nil)
	if got, code := h.fetched("nobody", "t", 0); code != 0 || got[0] != -1 {
		t.Fatalf("unknown group: %v code %d", got, code)
	}
	h.c.OffsetCommit(h.ctx, commitReq("g", "", -1, "t", map[int32]int64{0: 5, 2: 7}))
	h.c.OffsetCommit(h.ctx, commitReq("g", "", -1, "a", map[int32]int64{1: 3}))
	all := h.c.OffsetFetch(h.ctx, 9, "g", nil, false)
	var seen []string
	for _, tp := range all.Topics {
		for _, p := range tp.Partitions {
			seen = append(seen, fmt.Sprintf("%s/%d=%d@%d", tp.Topic, p.Partition, p.Offset, p.LeaderEpoch))
		}
	}
	if got := strings.Join(seen, " "); got != "a/1=3@7 t/0=5@7 t/2=7@7" {
		t.Fatalf("all offsets: %s", got)
	}
	// Before v5 there is no leader epoch.
	old := h.c.OffsetFetch(h.ctx, 4, "g", []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{0}}}, false)
	if p := old.Topics[0].Partitions[0]; p.Offset != 5 || p.LeaderEpoch != -1 || *p.Metadata != "m" {
		t.Fatalf("v4 fetch: %+v", p)
	}
}
