package controller_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestMembership_AddVoterThatIsDown: adding a voter at an address where
// nothing answers is refused, saying what it would cost the quorum, and
// nothing changes; forced, it is added.
func TestMembership_AddVoterThatIsDown(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	dead := memAddr(4) // no node 4 runs
	_, err := leader.Controller().AddVoter(ctx, 4, dead, false)
	if !errors.Is(err, controller.ErrVoterUnfit) || !strings.Contains(err.Error(), "does not answer") ||
		!strings.Contains(err.Error(), "a 4-voter quorum needs 3, so while it is down the other 3 would tolerate no failure, where the 3 voters now tolerate 1 failure; --force adds it anyway") {
		t.Fatalf("adding a voter that is down: err = %v; want %v naming the cost", err, controller.ErrVoterUnfit)
	}
	if got := voterIDs(t, leader); !slices.Equal(got, []int32{1, 2, 3}) {
		t.Fatalf("after the refusal the configuration is %v", got)
	}
	res, err := leader.Controller().AddVoter(ctx, 4, dead, true)
	if err != nil || !slices.Equal(memberIDs(res), []int32{1, 2, 3, 4}) {
		t.Fatalf("adding a voter that is down, forced: %v, %v", res, err)
	}
}

// TestMembership_AddVoterBehindIsANonvoterFirst: a joiner whose log is
// further behind the commit index than a voter may be is added as a
// nonvoter, and made a voter only once it is ready and has caught up: the
// quorum never counts a voter that cannot vote yet.
func TestMembership_AddVoterBehindIsANonvoterFirst(t *testing.T) {
	var nonvoter atomic.Bool
	c := newCluster(t, 3,
		withTune(func(cfg *controller.Config) {
			cfg.Logger = slog.New(sawMessage{prefix: "nonvoter added", seen: &nonvoter})
		}))
	leader := c.WaitForActive(5 * time.Second)
	ctx := context.Background()
	waits := make([]func() (uint64, error), 0, 3*controller.VoterLagBound)
	for range cap(waits) { // far more than a voter may lag behind
		wait, err := leader.Controller().ActiveLeadership().Queue(ctx, func(*fsm.Image) ([]*keelpb.Record, error) { return []*keelpb.Record{noOp()}, nil })
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, wait)
	}
	var last uint64
	for _, wait := range waits {
		index, err := wait()
		if err != nil {
			t.Fatal(err)
		}
		last = index
	}
	joiner := c.StartJoiner(4)
	res, err := leader.Controller().AddVoter(ctx, 4, joiner.Addr(), false)
	if err != nil || !slices.Equal(memberIDs(res), []int32{1, 2, 3, 4}) {
		t.Fatalf("adding a joiner that is behind: %v, %v", res, err)
	}
	if got := joiner.FSM().Image().Offset; got+controller.VoterLagBound < last {
		t.Errorf("node 4 was made a voter with its image at %d, before it caught up with %d", got, last)
	}
	if !nonvoter.Load() {
		t.Error("node 4 was not added as a nonvoter first")
	}
}

// sawMessage is a slog handler that notes whether a message starting
// with prefix was logged, by any node.
type sawMessage struct {
	prefix string
	seen   *atomic.Bool
}

func (h sawMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h sawMessage) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h sawMessage) WithGroup(string) slog.Handler            { return h }

func (h sawMessage) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		h.seen.Store(true)
	}
	return nil
}
