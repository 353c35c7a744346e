package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/internal/poll"
)

// TestFeatures_ValidateOnlyWritesNothing: ValidateFeatures (Kafka's
// UpdateFeatures validate_only) answers a raise the cluster can take as
// UpdateFeatures would, refuses one it cannot take and a direction that
// does not match, and writes nothing.
func TestFeatures_ValidateOnlyWritesNothing(t *testing.T) {
	c := newCluster(t, 3, withTune(func(cfg *controller.Config) { cfg.InitialMetadataVersion = 1 }))
	c.WaitForActive(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var u *controller.FeatureUpdate
	poll.UntilState(t, 30*time.Second, "a validate-only raise to 2", func() (bool, string) {
		act := c.Active()
		if act == nil {
			return false, "no active controller"
		}
		var err error
		u, err = act.Controller().ValidateFeatures(ctx, 2, false)
		return err == nil, errString(err)
	})
	if u.Previous != 1 || u.Level != 2 || u.Index != 0 {
		t.Fatalf("validated %+v; want 1 -> 2 at no index", u)
	}
	act := c.Active()
	if act == nil {
		t.Fatal("no active controller")
	}
	var fe *controller.FieldError
	if _, err := act.Controller().ValidateFeatures(ctx, 99, false); !errors.Is(err, controller.ErrUnsupportedMetadataVersion) {
		t.Errorf("validate-only raise to 99: %v; want ErrUnsupportedMetadataVersion", err)
	}
	if _, err := act.Controller().ValidateFeatures(ctx, 2, true); !errors.As(err, &fe) {
		t.Errorf("validate-only raise marked as a downgrade: %v; want a field error", err)
	}
	// Nothing was written: a no-op commits, and every node is still at 1.
	if _, _, err := act.Controller().AppendNoOp(ctx, "after-validate"); err != nil {
		t.Logf("no-op: %v", err)
	}
	for _, nd := range c.Nodes() {
		if lvl := nd.FSM().Image().FinalizedMetadataVersion(); lvl != 1 {
			t.Errorf("a node is at level %d after validate-only updates; want 1", lvl)
		}
	}
}
