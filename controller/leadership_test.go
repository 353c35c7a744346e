package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keel-dev/keel/fsm"
)

func TestLeadership_SubmitRefusesWhenFullOrClosed(t *testing.T) {
	c := &Controller{cfg: Config{EventQueueSize: 2, SessionTimeout: time.Second}, fsm: fsm.New()}
	l := c.newLeadership()
	defer l.cancel()
	ev := event{run: func() {}, abandon: func(error) {}}
	for i := 0; i < 2; i++ {
		if err := l.submit(context.Background(), ev); err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	if err := l.submit(context.Background(), ev); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("submit to a full queue: err = %v, want ErrQueueFull", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.submit(ctx, ev); !errors.Is(err, context.Canceled) {
		t.Fatalf("submit with a cancelled context: err = %v", err)
	}
}
