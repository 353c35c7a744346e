package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/keel-dev/keel/proto/keelpb"
)

// The fault suite's checks, on histories built by hand: each must accept
// what a correct cluster may do and catch what it must not.

func TestTopicModel(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	create := func(client, call, ret int, topic string, parts int32, out outcome) recordedOp {
		return recordedOp{Client: client, Op: topicOp{Kind: "create", Topic: topic, Partitions: parts}, Result: topicResult{Outcome: out}, Call: ms(call), Return: ms(ret)}
	}
	del := func(client, call, ret int, topic string, out outcome) recordedOp {
		return recordedOp{Client: client, Op: topicOp{Kind: "delete", Topic: topic}, Result: topicResult{Outcome: out}, Call: ms(call), Return: ms(ret)}
	}
	read := func(client, call, ret int, topic string, parts int32) recordedOp {
		out := topicResult{Outcome: outOK, Partitions: parts}
		if parts == 0 {
			out = topicResult{Outcome: outNotFound}
		}
		return recordedOp{Client: client, Op: topicOp{Kind: "describe", Topic: topic}, Result: out, Call: ms(call), Return: ms(ret)}
	}
	tests := []struct {
		name    string
		history []recordedOp
		ok      bool
	}{
		{"create then read", []recordedOp{create(0, 0, 10, "a", 2, outOK), read(1, 20, 30, "a", 2)}, true},
		{"read misses an acknowledged create", []recordedOp{create(0, 0, 10, "a", 2, outOK), read(1, 20, 30, "a", 0)}, false},
		{"stale read after delete", []recordedOp{
			create(0, 0, 10, "a", 1, outOK), del(0, 20, 30, "a", outOK), read(1, 40, 50, "a", 1),
		}, false},
		{"concurrent read may see either", []recordedOp{create(0, 0, 30, "a", 1, outOK), read(1, 10, 20, "a", 0)}, true},
		{"two creates both acknowledged", []recordedOp{create(0, 0, 10, "a", 1, outOK), create(1, 20, 30, "a", 1, outOK)}, false},
		{"exists without a create", []recordedOp{create(0, 0, 10, "a", 1, outExists)}, false},
		{"exists after an unknown create", []recordedOp{create(0, 0, 10, "a", 1, outUnknown), create(1, 20, 30, "a", 2, outExists), read(1, 40, 50, "a", 1)}, true},
		{"an unknown create that never happened", []recordedOp{create(0, 0, 10, "a", 1, outUnknown), read(1, 20, 30, "a", 0)}, true},
		{"an unknown create cannot happen twice", []recordedOp{
			create(0, 0, 10, "a", 1, outUnknown), read(1, 20, 30, "a", 1), del(1, 40, 50, "a", outOK), read(1, 60, 70, "a", 1),
		}, false},
		{"a refused create has no effect", []recordedOp{create(0, 0, 10, "a", 1, outRefused), read(1, 20, 30, "a", 1)}, false},
		{"names are independent", []recordedOp{create(0, 0, 10, "a", 1, outOK), read(1, 20, 30, "b", 0), del(1, 40, 50, "b", outNotFound)}, true},
		{"partition count seen must be the created one", []recordedOp{create(0, 0, 10, "a", 1, outOK), read(1, 20, 30, "a", 2)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := porcupine.CheckOperations(topicModel, porcupineHistory(tt.history))
			if got != tt.ok {
				t.Fatalf("linearizable = %v, want %v", got, tt.ok)
			}
		})
	}
}

func TestAckViolations(t *testing.T) {
	creates := map[string]outcome{"u0": outOK, "u1": outRefused, "u2": outUnknown, "u3": outUnknown, "u4": outOK, "u5": outRefused}
	final := map[string]bool{"u0": true, "u2": true, "u5": true}
	got := ackViolations(creates, final)
	want := []string{
		"topic u4: create was acknowledged, but the topic is missing",
		"topic u5: create was refused, but the topic exists",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ackViolations =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestActiveViolations(t *testing.T) {
	obs := func(node int32, active, epoch int64, leader int32) controllerObs {
		return controllerObs{Node: node, ActiveEpoch: active, Epoch: epoch, EpochLeader: leader}
	}
	tests := []struct {
		name string
		obs  []controllerObs
		want string // a substring of the first violation; "" for none
	}{
		{"one active per epoch", []controllerObs{obs(1, 1, 1, 1), obs(2, 0, 1, 1), obs(2, 2, 2, 2), obs(1, 0, 2, 2)}, ""},
		{"a deposed leader still active in its own epoch", []controllerObs{obs(1, 1, 1, 1), obs(2, 2, 2, 2), obs(1, 1, 2, 2)}, ""},
		{"two active in one epoch", []controllerObs{obs(1, 3, 3, 1), obs(2, 3, 3, 1)}, "node 2 was active in epoch 3, which belongs to node 1"},
		{"views disagree on an epoch's owner", []controllerObs{obs(1, 0, 4, 1), obs(2, 0, 4, 2)}, "epoch 4 belongs to node 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := activeViolations(tt.obs)
			if tt.want == "" && len(got) > 0 || tt.want != "" && (len(got) == 0 || !strings.Contains(got[0], tt.want)) {
				t.Fatalf("activeViolations = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestEpochRegressions(t *testing.T) {
	obs := []controllerObs{
		{Node: 1, Incarnation: 0, Epoch: 3}, {Node: 1, Incarnation: 0, Epoch: 4},
		{Node: 1, Incarnation: 1, Epoch: 2}, // restarted: replaying from a snapshot
		{Node: 1, Incarnation: 1, Epoch: 4},
		{Node: 2, Incarnation: 0, Epoch: 4}, {Node: 2, Incarnation: 0, Epoch: 3},
	}
	got := epochRegressions(obs)
	if len(got) != 1 || !strings.Contains(got[0], "node 2's epoch went from 4") {
		t.Fatalf("epochRegressions = %q, want one for node 2", got)
	}
}

func TestBrokerViolations(t *testing.T) {
	rs := func(epoch int32) []*keelpb.ReplicaState {
		return []*keelpb.ReplicaState{{Topic: "fixed", Partition: 0, LeaderEpoch: epoch}}
	}
	owners := map[int64]int32{1: 1, 2: 2}
	tests := []struct {
		name string
		obs  []brokerObs
		want string
	}{
		{"all growing", []brokerObs{
			{Broker: 1, ControllerID: 1, ControllerEpoch: 1, Offset: 5, Replicas: rs(0)},
			{Broker: 1, ControllerID: 2, ControllerEpoch: 2, Offset: 9, Replicas: rs(1)},
		}, ""},
		{"a restart may start behind", []brokerObs{
			{Broker: 1, Incarnation: 0, ControllerEpoch: 2, Offset: 9, Replicas: rs(3)},
			{Broker: 1, Incarnation: 1, ControllerEpoch: 1, Offset: 4, Replicas: rs(1)},
		}, ""},
		{"leader epoch goes back", []brokerObs{
			{Broker: 1, ControllerEpoch: 1, Offset: 5, Replicas: rs(3)},
			{Broker: 1, ControllerEpoch: 1, Offset: 6, Replicas: rs(2)},
		}, "fixed-0's leader epoch go from 3 back to 2"},
		{"offset goes back", []brokerObs{{Broker: 2, Offset: 6}, {Broker: 2, Offset: 5}}, "offset went from 6 back to 5"},
		{"pushed by the wrong controller", []brokerObs{{Broker: 3, ControllerID: 1, ControllerEpoch: 2}}, "followed node 1 in epoch 2, which belongs to node 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := brokerViolations(tt.obs, owners)
			if tt.want == "" && len(got) > 0 || tt.want != "" && (len(got) == 0 || !strings.Contains(got[0], tt.want)) {
				t.Fatalf("brokerViolations = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPartitionViolations(t *testing.T) {
	p := func(leader int32, replicas, isr []int32) *keelpb.PartitionDescription {
		return &keelpb.PartitionDescription{Leader: leader, Replicas: replicas, Isr: isr}
	}
	tests := []struct {
		name string
		part *keelpb.PartitionDescription
		want string
	}{
		{"healthy", p(1, []int32{1, 2, 3}, []int32{1, 2}), ""},
		{"leaderless, ISR kept", p(-1, []int32{1, 2}, []int32{2}), ""},
		{"leader outside ISR", p(3, []int32{1, 2, 3}, []int32{1, 2}), "leader 3 is not in ISR"},
		{"ISR outside replicas", p(1, []int32{1, 2}, []int32{1, 4}), "ISR [1 4] is not within replicas"},
		{"replica twice", p(1, []int32{1, 1}, []int32{1}), "replica 1 listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := partitionViolations("t", []*keelpb.PartitionDescription{tt.part})
			if tt.want == "" && len(got) > 0 || tt.want != "" && (len(got) == 0 || !strings.Contains(got[0], tt.want)) {
				t.Fatalf("partitionViolations = %q, want %q", got, tt.want)
			}
		})
	}
}
