package kafka

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/keel-dev/keel/broker/batchcheck"
	"github.com/keel-dev/keel/fsm"
)

// topicRules are the configs of a topic that the listener enforces on each
// produced batch, read from the image the request is served with: every
// broker applies a change as soon as it has replayed it, on whichever
// broker leads, with no log to reopen (as a KRaft broker's metadata
// publisher hands a ConfigRecord to its LogManager).
type topicRules struct {
	// maxBytes is max.message.bytes: a larger batch is MESSAGE_TOO_LARGE.
	maxBytes int64
	// logAppendTime: the leader stamps each batch (message.timestamp.type).
	logAppendTime bool
	// before and after bound a CreateTime record's timestamp around the
	// leader's clock (message.timestamp.before.max.ms, .after.max.ms).
	before, after int64
	// compacted: cleanup.policy holds compact, so every record needs a
	// key.
	compacted bool
}

// rulesCache holds the rules of the topics of one image: reading them
// costs about a microsecond a topic, which every produce request would
// pay again. Only topics the image holds are kept, so a client naming
// topics at random grows nothing.
type rulesCache struct {
	img   *fsm.Image
	rules sync.Map // topic name -> topicRules
}

// rulesHolder holds the Server's rulesCache.
type rulesHolder struct{ p atomic.Pointer[rulesCache] }

// topicRules returns topic's rules in img, from the cache when it is of
// img. Requests served with another image (a newer one, or an older one
// that raced it) replace the cache: a miss, never a stale answer.
func (s *Server) topicRules(img *fsm.Image, topic string) topicRules {
	c := s.rules.p.Load()
	if c == nil || c.img != img {
		c = &rulesCache{img: img}
		s.rules.p.Store(c)
	}
	if r, ok := c.rules.Load(topic); ok {
		return r.(topicRules)
	}
	r, known := topicRulesOf(img, topic)
	if known {
		c.rules.Store(topic, r)
	}
	return r
}

// topicRulesOf reads topic's rules from img, and whether img holds the
// topic; one it does not has the defaults (its produce is refused before
// they matter).
func topicRulesOf(img *fsm.Image, topic string) (topicRules, bool) {
	t, known := img.Topic(topic) // nil: the defaults
	num := func(name string) int64 {
		n, err := strconv.ParseInt(img.TopicConfig(t, name).Value, 10, 64)
		if err != nil {
			// The image holds only values fsm.CheckConfig took.
			d, _ := fsm.LookupConfig(name)
			n, _ = strconv.ParseInt(d.Default, 10, 64)
		}
		return n
	}
	return topicRules{
		maxBytes:      num(fsm.MaxMessageBytes),
		logAppendTime: img.TopicConfig(t, fsm.MessageTimestampType).Value == fsm.LogAppendTime,
		before:        num(fsm.MessageTimestampBeforeMaxMs),
		after:         num(fsm.MessageTimestampAfterMaxMs),
		compacted:     slices.Contains(strings.Split(img.TopicConfig(t, fsm.CleanupPolicy).Value, ","), "compact"),
	}, known
}

// batchRules are the batchcheck rules of a batch for the topic, at now
// (Unix milliseconds): a CreateTime topic's records must have timestamps
// within its bounds.
func (r topicRules) batchRules(version int16, now int64) batchcheck.Rules {
	// Kafka takes zstd from Produce v7 on.
	return batchcheck.Rules{NoZstd: version < 7, Timestamps: !r.logAppendTime, Now: now, BeforeMax: r.before, AfterMax: r.after,
		RequireKeys: r.compacted}
}
