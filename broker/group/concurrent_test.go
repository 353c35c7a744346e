package group

import (
	"fmt"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Concurrent commits of a group to the same partitions are applied in
// memory in the order the log holds them: a coordinator reloaded from the
// log answers every offset as the one that wrote them, and every answered
// commit is the newest or was overtaken by one that was also answered.
func TestOffsetCommit_ConcurrentCommitsMatchTheLog(t *testing.T) {
	h := newHarness(t, nil)
	const writers, commits, partitions = 4, 50, 3
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range commits {
				offsets := make(map[int32]int64)
				for p := range int32(partitions) {
					offsets[p] = int64(w*1000 + i)
				}
				group := fmt.Sprintf("g%d", i%2)
				if codes := commitCodes(h.c.OffsetCommit(h.ctx, commitReq(group, "", -1, "t", offsets))); codes[0] != 0 {
					t.Errorf("commit: %v", codes)
					return
				}
			}
		}()
	}
	// A member group beside them, joining and leaving.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 10 {
			id, gen := h.stable("m")
			h.c.OffsetCommit(h.ctx, commitReq("m", id, gen, "t", map[int32]int64{0: int64(gen)}))
			r := kmsg.NewPtrLeaveGroupRequest()
			r.Version = 1
			r.Group, r.MemberID = "m", id
			h.c.LeaveGroup(h.ctx, r)
		}
	}()
	wg.Wait()

	h2 := newHarnessOn(t, h.log, nil)
	for _, group := range []string{"g0", "g1", "m"} {
		want, _ := h.fetched(group, "", 0)
		got, _ := h2.fetched(group, "", 0)
		if fmt.Sprint(got) != fmt.Sprint(want) || len(want) == 0 {
			t.Errorf("%s: reloaded %v, the writer answers %v", group, got, want)
		}
		// All of a commit's partitions are one batch: they agree.
		for p := range int32(partitions) {
			if group != "m" && got[p] != got[0] {
				t.Errorf("%s: partition %d at %d, partition 0 at %d", group, p, got[p], got[0])
			}
		}
	}
}
