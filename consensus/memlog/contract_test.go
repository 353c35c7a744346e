package memlog

import (
	"testing"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/consensus/consensustest"
)

// TestContract runs the contract every consensus.Log keeps, with the
// first voter elected.
func TestContract(t *testing.T) {
	consensustest.Run(t, func(t *testing.T, voters []int32, sm func(int32) consensus.StateMachine) map[int32]consensus.Log {
		c := NewCluster(voters, sm)
		t.Cleanup(c.Close)
		logs := make(map[int32]consensus.Log)
		for _, id := range voters {
			logs[id] = c.Node(id)
		}
		if err := c.Elect(voters[0]); err != nil {
			t.Fatal(err)
		}
		return logs
	})
}
