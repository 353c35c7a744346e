package rpc

import (
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/hostport"
	"github.com/keel-dev/keel/proto/keelpb"
)

// Field bounds for requests: generous for real use, small enough that a bad
// client cannot make the controller store or log megabytes.
const (
	maxAddressLen   = 255
	maxRackLen      = 255
	maxClusterIDLen = 64
)

func validBrokerID(id int32) error {
	if id < 0 {
		return invalidArgument("broker_id", "%d is negative", id)
	}
	return nil
}

func validBrokerEpoch(epoch int64) error {
	if epoch <= 0 {
		return invalidArgument("broker_epoch", "%d is not a broker epoch (it must be positive)", epoch)
	}
	return nil
}

// validPreviousBrokerEpoch: a broker epoch, -1 (an unclean shutdown) or 0
// (not reported).
func validPreviousBrokerEpoch(epoch int64) error {
	if epoch < -1 {
		return invalidArgument("previous_broker_epoch", "%d is not a broker epoch, -1 (unclean shutdown) or 0 (not reported)", epoch)
	}
	return nil
}

func validIncarnationID(id string) error {
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return invalidArgument("incarnation_id", "%q is not a UUID", fsm.Truncate(id))
	}
	return nil
}

// validAddress checks an address others will dial, by the rule --voters
// uses (hostport.Check: host:port, a host, a port in 1..65535),
// within the request bounds.
func validAddress(field, addr string) error {
	if len(addr) > maxAddressLen {
		return invalidArgument(field, "longer than %d bytes", maxAddressLen)
	}
	if err := hostport.Check(addr); err != nil {
		return invalidArgument(field, "%v", err)
	}
	return nil
}

// validOptionalAddress is validAddress for a field that may be empty.
func validOptionalAddress(field, addr string) error {
	if addr == "" {
		return nil
	}
	return validAddress(field, addr)
}

func validMaxLen(field, v string, n int) error {
	if len(v) > n {
		return invalidArgument(field, "longer than %d bytes", n)
	}
	return nil
}

func validVersionRange(lo, hi uint32) error {
	if lo == 0 {
		return invalidArgument("min_metadata_version", "must be at least 1")
	}
	if lo > hi {
		return invalidArgument("max_metadata_version", "%d is below min_metadata_version %d", hi, lo)
	}
	return nil
}

func validNonNegative(field string, v int32) error {
	if v < 0 {
		return invalidArgument(field, "%d is negative", v)
	}
	return nil
}

// validTopicRef checks a name that refers to an existing topic: a name no
// topic can have is refused; a well-formed unknown one is the controller's
// NotFound.
func validTopicRef(field, name string) error {
	if name == "" {
		return invalidArgument(field, "is empty")
	}
	return validMaxLen(field, name, fsm.MaxTopicNameLen)
}

// duplicateID returns an id that ids holds twice, if any. ids is short (at
// most maxReplicationFactor), so a scan beats a map.
func duplicateID(ids []int32) (int32, bool) {
	for i, id := range ids {
		if slices.Contains(ids[i+1:], id) {
			return id, true
		}
	}
	return 0, false
}

// firstError returns the first non-nil error: validations in field order.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ValidateFetch checks a replica fetch (BrokerService.Fetch, served by
// brokers) with the rules the controllers' requests get: InvalidArgument
// naming the field. A broker calls it before any data plane sees the
// request, so every DataPlane gets the same refusals.
func ValidateFetch(req *keelpb.FetchRequest) error {
	if err := firstError(
		validNonNegative("replica_id", req.GetReplicaId()),
		validTopicID(req.GetTopicId()),
		validNonNegative("partition", req.GetPartition()),
		validNonNegative("leader_epoch", req.GetLeaderEpoch()),
	); err != nil {
		return err
	}
	switch {
	case req.GetFetchOffset() < 0:
		return invalidArgument("fetch_offset", "%d is negative", req.GetFetchOffset())
	case req.GetBrokerEpoch() < 0:
		return invalidArgument("broker_epoch", "%d is negative", req.GetBrokerEpoch())
	case req.LastFetchedEpoch != nil && req.GetLastFetchedEpoch() < 0:
		return invalidArgument("last_fetched_epoch", "%d is negative (leave it out when the log holds no epoch)", req.GetLastFetchedEpoch())
	case req.GetMaxBytes() < 0:
		return invalidArgument("max_bytes", "%d is negative", req.GetMaxBytes())
	case req.GetMaxWaitMs() < 0:
		return invalidArgument("max_wait_ms", "%d is negative", req.GetMaxWaitMs())
	case req.GetLogStartOffset() < 0:
		return invalidArgument("log_start_offset", "%d is negative", req.GetLogStartOffset())
	}
	return nil
}

// MaxFetchSessionPartitions is the most partitions one FetchSession request
// may add, change or forget: a follower following more from one leader
// adds them over several requests.
const MaxFetchSessionPartitions = 10_000

// ValidateFetchSession checks one request of a fetch session
// (BrokerService.FetchSession) as ValidateFetch checks a fetch: each
// partition's fields, and its index in the field's name.
func ValidateFetchSession(req *keelpb.FetchSessionRequest) error {
	if err := firstError(
		validNonNegative("replica_id", req.GetReplicaId()),
		validNonNegative("max_wait_ms", req.GetMaxWaitMs()),
		validNonNegative("max_bytes", req.GetMaxBytes()),
	); err != nil {
		return err
	}
	if req.GetBrokerEpoch() < 0 {
		return invalidArgument("broker_epoch", "%d is negative", req.GetBrokerEpoch())
	}
	if n := len(req.GetPartitions()) + len(req.GetForgotten()); n > MaxFetchSessionPartitions {
		return invalidArgument("partitions", "%d partitions and forgotten; at most %d in one request", n, MaxFetchSessionPartitions)
	}
	for i, p := range req.GetPartitions() {
		field := func(name string) string { return fmt.Sprintf("partitions[%d].%s", i, name) }
		switch {
		case len(p.GetTopicId()) != len(fsm.TopicID{}):
			return invalidArgument(field("topic_id"), "%d bytes; a topic id is %d", len(p.GetTopicId()), len(fsm.TopicID{}))
		case p.GetPartition() < 0:
			return invalidArgument(field("partition"), "%d is negative", p.GetPartition())
		case p.GetLeaderEpoch() < 0:
			return invalidArgument(field("leader_epoch"), "%d is negative", p.GetLeaderEpoch())
		case p.GetFetchOffset() < 0:
			return invalidArgument(field("fetch_offset"), "%d is negative", p.GetFetchOffset())
		case p.LastFetchedEpoch != nil && p.GetLastFetchedEpoch() < 0:
			return invalidArgument(field("last_fetched_epoch"), "%d is negative (leave it out when the log holds no epoch)", p.GetLastFetchedEpoch())
		case p.GetLogStartOffset() < 0:
			return invalidArgument(field("log_start_offset"), "%d is negative", p.GetLogStartOffset())
		case p.GetMaxBytes() < 0:
			return invalidArgument(field("max_bytes"), "%d is negative", p.GetMaxBytes())
		}
	}
	for i, k := range req.GetForgotten() {
		switch {
		case len(k.GetTopicId()) != len(fsm.TopicID{}):
			return invalidArgument(fmt.Sprintf("forgotten[%d].topic_id", i), "%d bytes; a topic id is %d", len(k.GetTopicId()), len(fsm.TopicID{}))
		case k.GetPartition() < 0:
			return invalidArgument(fmt.Sprintf("forgotten[%d].partition", i), "%d is negative", k.GetPartition())
		}
	}
	return nil
}
