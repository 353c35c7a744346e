package controller

import (
	"fmt"
	"strings"

	"github.com/keel-dev/keel/fsm"
)

// NoLeaderReason says in one line why partition p of img has no leader,
// and what it waits for (electLeader's rules, read backwards), for `keel
// topic describe`; "" when it has a leader. For example: "no leader: its
// last ISR member restarted after an unclean shutdown; waiting for an
// eligible replica (ELR 2: fenced) to return, or an unclean election (keel
// partition elect --type unclean)".
func NoLeaderReason(img *fsm.Image, p *fsm.Partition) string {
	if p.HasLeader() {
		return ""
	}
	rules := rulesFor(img, p.TopicID)
	// A leader the rules would elect now, which the next election (a
	// broker's return, a controller's failover) makes leader.
	t := sharedTarget(p)
	electLeader(&t, newView(img), rules.unclean)
	if t.leader != fsm.NoLeader {
		return fmt.Sprintf("no leader yet: broker %d may lead it, and will at the next election", t.leader)
	}
	var why, waiting string
	elr, lastKnown := p.ELR(), p.LastKnownELR()
	switch {
	case len(p.ISR) > 0:
		why = fmt.Sprintf("no ISR member is eligible (ISR %s)", brokerStates(img, p.ISR))
		waiting = "an ISR member"
		if len(elr) > 0 {
			waiting += fmt.Sprintf(" or an eligible replica (ELR %s)", brokerStates(img, elr))
		}
		waiting += " to return"
	case len(elr) > 0:
		why = "its last ISR member restarted after an unclean shutdown"
		waiting = fmt.Sprintf("an eligible replica (ELR %s) to return", brokerStates(img, elr))
	case len(lastKnown) == 1:
		why = "every replica known to hold every committed record restarted after an unclean shutdown"
		waiting = fmt.Sprintf("its last leader (%s) to return and lead with what it has", brokerStates(img, lastKnown))
	default:
		why = "no replica is known to hold every committed record"
	}
	unclean := "an unclean election (keel partition elect --type unclean)"
	if rules.unclean {
		unclean = "any replica to return (" + fsm.UncleanLeaderElection + "=true)"
	}
	if waiting == "" {
		return fmt.Sprintf("no leader: %s; waiting for %s", why, unclean)
	}
	return fmt.Sprintf("no leader: %s; waiting for %s, or %s", why, waiting, unclean)
}

// brokerStates renders brokers with their states: "1: fenced, 2: active".
func brokerStates(img *fsm.Image, ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		state := "unregistered"
		if b, ok := img.Broker(id); ok {
			state = strings.ReplaceAll(b.State(), "_", " ")
		}
		parts[i] = fmt.Sprintf("%d: %s", id, state)
	}
	return strings.Join(parts, ", ")
}
