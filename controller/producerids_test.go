package controller

import (
	"errors"
	"math"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestProducerIdControlManager_Blocks: blocks follow each other without a
// gap or an overlap, whichever broker asks, and a stale broker epoch or an
// exhausted id space is refused without a record.
func TestProducerIdControlManager_Blocks(t *testing.T) {
	c := newReplicationCtx(t)
	c.registerBrokers(1, 2)
	e1, e2 := c.broker(1).Epoch, c.broker(2).Epoch

	var want int64
	for i, b := range []struct {
		id    int32
		epoch int64
	}{{1, e1}, {2, e2}, {1, e1}} {
		recs, block, err := producerIDRecords(c.img, b.id, b.epoch)
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		if block.Start != want || block.Len != fsm.ProducerIDBlockSize {
			t.Fatalf("block %d = %+v, want start %d, len %d", i, block, want, fsm.ProducerIDBlockSize)
		}
		c.replay(recs)
		want += fsm.ProducerIDBlockSize
		if c.img.NextProducerID != want {
			t.Fatalf("after block %d the next id is %d, want %d", i, c.img.NextProducerID, want)
		}
	}

	tests := []struct {
		name  string
		id    int32
		epoch int64
		want  error
	}{
		{"stale epoch", 1, e1 - 1, ErrStaleBrokerEpoch},
		{"unknown broker", 9, 1, ErrBrokerNotRegistered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, _, err := producerIDRecords(c.img, tt.id, tt.epoch)
			if !errors.Is(err, tt.want) || recs != nil {
				t.Fatalf("records %v, err = %v; want %v", recs, err, tt.want)
			}
		})
	}

	t.Run("exhausted", func(t *testing.T) {
		last := []*keelpb.Record{{Record: &keelpb.Record_ProducerIds{ProducerIds: &keelpb.ProducerIdsRecord{
			BrokerId: 1, BrokerEpoch: e1, NextProducerId: math.MaxInt64 - fsm.ProducerIDBlockSize + 1}}}}
		c.replay(last)
		if recs, _, err := producerIDRecords(c.img, 1, e1); !errors.Is(err, ErrRefused) || recs != nil {
			t.Fatalf("records %v, err = %v; want ErrRefused", recs, err)
		}
	})
}
