package server

import (
	"errors"
	"fmt"
	"testing"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/proto/keelpb"
)

// TestElectionReason: each reason an election did not happen is named as
// Kafka's ReplicationControlManager answers ElectLeaders for it.
func TestElectionReason(t *testing.T) {
	preferred, unclean := keelpb.ElectionType_ELECTION_TYPE_PREFERRED, keelpb.ElectionType_ELECTION_TYPE_UNCLEAN
	for _, tt := range []struct {
		name string
		typ  keelpb.ElectionType
		err  error
		want string
	}{
		{"leader already preferred", preferred, controller.ErrElectionNotNeeded, "ELECTION_NOT_NEEDED"},
		{"leader alive, unclean", unclean, controller.ErrElectionNotNeeded, "ELECTION_NOT_NEEDED"},
		{"preferred out of the ISR", preferred, controller.ErrPreferredNotReady, "PREFERRED_LEADER_NOT_AVAILABLE"},
		{"no live replica", unclean, controller.ErrNoLiveReplica, "ELIGIBLE_LEADERS_NOT_AVAILABLE"},
		{"awaiting logs, preferred", preferred, controller.ErrAwaitingLogs, "PREFERRED_LEADER_NOT_AVAILABLE"},
		{"awaiting logs, unclean", unclean, controller.ErrAwaitingLogs, "ELIGIBLE_LEADERS_NOT_AVAILABLE"},
		{"unknown partition", preferred, fmt.Errorf("%w: t/9", controller.ErrUnknownTopic), "UNKNOWN_TOPIC_OR_PARTITION"},
		{"anything else", preferred, errors.New("type: 7 is not preferred or unclean"), "INVALID_REQUEST"},
	} {
		if got := electionReason(tt.typ, tt.err); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}
