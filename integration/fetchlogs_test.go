package integration

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

// fetchLine is a follower's line about its fetches failing or working
// again, with the partition it names.
var fetchLine = regexp.MustCompile(`level=(\w+) msg="(fetch from the leader failed; retrying|fetching from the leader again)".* topic=(\S+) partition=(\d+)`)

// Creating topics makes followers fetch from leaders that may not have
// applied their leadership yet (NOT_LEADER_OR_FOLLOWER,
// UNKNOWN_TOPIC_OR_PARTITION for a few milliseconds): expected, so at
// Debug, not a line at INFO or above per partition of every create.
func TestLogs_TopicCreateLogsNoExpectedFetchRetry(t *testing.T) {
	brokers := []int32{1, 2, 3}
	// At debug, to see that the retries happened and ended.
	c := startPartitionClusterWith(t, brokers, nil, []string{"--log-level", "debug"})
	const topics, partitions = 10, 6
	for i := range topics {
		c.createTopic(t, fmt.Sprintf("logs-%d", i), "--partitions", fmt.Sprint(partitions), "--replication-factor", "3")
	}

	// Every follower role applied, and every retry over.
	var lines []string
	poll.UntilState(t, 60*time.Second, "every follower to fetch", func() (bool, string) {
		lines = lines[:0]
		followers, failing := 0, map[string]bool{}
		for _, id := range brokers {
			log := logText(t, c.broker(id))
			followers += strings.Count(log, `msg="become follower"`)
			for _, line := range strings.Split(log, "\n") {
				m := fetchLine.FindStringSubmatch(line)
				if m == nil {
					continue
				}
				lines = append(lines, line)
				key := fmt.Sprintf("%d %s/%s", id, m[3], m[4])
				failing[key] = strings.HasPrefix(m[2], "fetch from")
			}
		}
		var still []string
		for k, f := range failing {
			if f {
				still = append(still, k)
			}
		}
		return followers >= topics*partitions*2 && len(still) == 0,
			fmt.Sprintf("%d follower roles of %d; still failing: %v", followers, topics*partitions*2, still)
	})
	t.Logf("%d lines about failed fetches", len(lines))
	for _, line := range lines {
		if !strings.Contains(line, "level=DEBUG") {
			t.Errorf("an expected fetch retry logged above Debug: %s", line)
		}
	}
}
