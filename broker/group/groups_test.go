package group_test

import (
	"github.com/keel-dev/keel/broker/group"
	"github.com/keel-dev/keel/broker/kafka"
)

// The Coordinator is the listener's Groups; package group itself must not
// import the listener.
var _ kafka.Groups = (*group.Coordinator)(nil)
