package broker

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

func TestLoggingHandler(t *testing.T) {
	l := newTestLog(t) // broker 1 at epoch 3 and broker 2 at epoch 4; 1 unfenced at 6
	// after applies records to the last image of the log.
	after := func(t *testing.T, records ...*keelpb.Record) *fsm.Image {
		t.Helper()
		batch, _ := fsm.DecodeBatch(mustEncode(t, records...))
		img, err := fsm.Apply(l.images[5], 8, 1, batch)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	tests := []struct {
		name   string
		before *fsm.Image
		after  func(t *testing.T) *fsm.Image
		want   []string
	}{
		{"registered", l.images[1], func(*testing.T) *fsm.Image { return l.images[3] },
			[]string{`msg="broker registered" id=1 epoch=3`, `msg="broker registered" id=2 epoch=4`}},
		{"unfenced", l.images[3], func(*testing.T) *fsm.Image { return l.images[4] }, []string{`msg="broker active" id=1 epoch=3`}},
		{"nothing for brokers", l.images[4], func(*testing.T) *fsm.Image { return l.images[5] }, nil},
		{"fenced", l.images[5], func(t *testing.T) *fsm.Image { return after(t, fenceRec(1, 3)) }, []string{`msg="broker fenced" id=1 epoch=3`}},
		{"unregistered", l.images[5], func(t *testing.T) *fsm.Image { return after(t, unregisterRec(2, 4)) }, []string{`msg="broker unregistered" id=2 epoch=4`}},
		{"shutting down", l.images[5], func(t *testing.T) *fsm.Image { return after(t, shuttingDownRec(1, 3)) }, []string{`msg="broker shutting_down" id=1 epoch=3`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			h := LoggingHandler{Logger: slog.New(slog.NewTextHandler(&buf, nil))}
			h.MetadataChanged(tt.before, tt.after(t))
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if buf.Len() == 0 {
				lines = nil
			}
			if len(lines) != len(tt.want) {
				t.Fatalf("logged %q, want %q", lines, tt.want)
			}
			for i, want := range tt.want {
				if !strings.Contains(lines[i], want) {
					t.Fatalf("line %d = %q, want %q", i, lines[i], want)
				}
			}
		})
	}
}

func TestLoggingHandler_Replicas(t *testing.T) {
	var buf bytes.Buffer
	h := LoggingHandler{Logger: slog.New(slog.NewTextHandler(&buf, nil))}
	p := PartitionState{Topic: "t", TopicID: topicT, Partition: 3, Leader: 2, LeaderEpoch: 4, PartitionEpoch: 6, Replicas: []int32{1, 2}, ISR: []int32{2, 1}}
	h.BecomeFollower(p)
	p.Leader = 1
	h.BecomeLeader(p)
	h.StopReplica(topicT, 3, true)
	want := []string{
		`msg="become follower" topic=t partition=3 leader=2 leader_epoch=4 partition_epoch=6 isr="[2 1]"`,
		`msg="become leader" topic=t partition=3 leader_epoch=4 partition_epoch=6 isr="[2 1]"`,
		`msg="stop replica" topic_id=07000000-0000-0000-0000-000000000000 partition=3 delete=true`,
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("logged %q, want %q", lines, want)
	}
	for i := range want {
		if !strings.Contains(lines[i], want[i]) {
			t.Fatalf("line %d = %q, want %q", i, lines[i], want[i])
		}
	}
}
