package poll

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWait(t *testing.T) {
	boom := errors.New("boom")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		timeout time.Duration
		cond    func(n int32) (bool, error)
		wantErr string
		minAsks int32
	}{
		{name: "holds at once", ctx: context.Background(), timeout: time.Second, cond: func(int32) (bool, error) { return true, nil }, minAsks: 1},
		{name: "holds on the third ask", ctx: context.Background(), timeout: 5 * time.Second, cond: func(n int32) (bool, error) { return n >= 3, nil }, minAsks: 3},
		{name: "never holds", ctx: context.Background(), timeout: 20 * time.Millisecond, cond: func(int32) (bool, error) { return false, nil },
			wantErr: "timed out after 20ms waiting for the thing", minAsks: 2},
		{name: "the condition fails", ctx: context.Background(), timeout: time.Second, cond: func(int32) (bool, error) { return false, boom }, wantErr: "boom", minAsks: 1},
		{name: "the context ends", ctx: cancelled, timeout: time.Second, cond: func(int32) (bool, error) { return false, nil }, wantErr: "context canceled", minAsks: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asks atomic.Int32
			err := Wait(tt.ctx, tt.timeout, time.Millisecond, "the thing", func() (bool, error) { return tt.cond(asks.Add(1)) })
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Wait = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Wait = %v, want an error containing %q", err, tt.wantErr)
			}
			if n := asks.Load(); n < tt.minAsks {
				t.Fatalf("asked %d times, want at least %d", n, tt.minAsks)
			}
		})
	}
}
