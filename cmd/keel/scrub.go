package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/rpc"
)

// scrubbedLog is the JSON contract of one row of `keel broker scrub`.
type scrubbedLog struct {
	Topic     string `json:"topic"`
	TopicID   string `json:"topic_id"`
	Partition int32  `json:"partition"`
	Role      string `json:"role"`
	Segments  int32  `json:"segments"`
	Bytes     int64  `json:"bytes"`
	// Damage is the last damage a scrub found in the log, "" if none;
	// DamageOffset where the good log ends; Repaired once the log was cut
	// there to fetch the rest from the leader again.
	Damage       string `json:"damage"`
	DamageOffset int64  `json:"damage_offset"`
	Repaired     bool   `json:"repaired"`
	// LeaderDamage is the last answer this replica refused from its
	// leader as damaged, "" if none.
	LeaderDamage   string `json:"leader_damage"`
	LogStartOffset int64  `json:"log_start_offset"`
	LogEndOffset   int64  `json:"log_end_offset"`
}

func newBrokerScrubCmd() *cobra.Command {
	f := &brokerCallFlags{}
	cmd := &cobra.Command{
		Use:   "scrub",
		Short: "Verify every sealed segment of one broker's logs now, showing the damage found",
		Long: `Make one broker read every sealed segment of every log it holds, at full
speed, and verify it: each batch's CRC-32C and framing, offsets that run on
with no gap, each index entry at a batch, the log start at a segment's base.
This is what the background scrub (--log-scrub-rate) does slowly, pass after
pass; damage that still parses (a flipped bit) is found by nothing else
before a reader or a follower meets it.

A follower whose log is damaged cuts it where the good log ends and fetches
the rest from its leader again (REPAIRED); it rejoins the ISR only once it
has caught up. A leader's damage is reported here and in its log, and its
followers refuse the damaged batch: move the broker's leaderships away
(keel broker drain) and repair its log. LEADER DAMAGE is the last answer this broker, as a
follower, refused from its leader. Needs an admin certificate.`,
		Example: `  keel broker scrub --address 127.0.0.1:9201`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return brokerCall(cmd, f, func(ctx context.Context, bc *rpc.BrokerClient) ([]scrubbedLog, error) {
				resp, err := bc.ScrubLogs(ctx)
				if err != nil {
					return nil, err
				}
				rows := make([]scrubbedLog, 0, len(resp.GetLogs()))
				for _, l := range resp.GetLogs() {
					rows = append(rows, scrubbedLog{Topic: l.GetTopic(), TopicID: l.GetTopicId(), Partition: l.GetPartition(), Role: l.GetRole(),
						Segments: l.GetSegments(), Bytes: l.GetBytes(), Damage: l.GetDamage(), DamageOffset: l.GetDamageOffset(),
						Repaired: l.GetRepaired(), LeaderDamage: l.GetLeaderDamage(), LogStartOffset: l.GetLogStartOffset(), LogEndOffset: l.GetLogEndOffset()})
				}
				return rows, nil
			}, scrubTable)
		},
	}
	f.add(cmd, 10*time.Minute)
	return cmd
}

func scrubTable(w io.Writer, rows []scrubbedLog) error {
	return tableOf([]string{"TOPIC", "PARTITION", "ROLE", "SEGMENTS", "BYTES", "LOG START", "LOG END", "DAMAGE", "REPAIRED", "LEADER DAMAGE"}, "No logs.", func(r scrubbedLog) []string {
		repaired := "-"
		if r.Damage != "" {
			repaired = fmt.Sprint(r.Repaired)
		}
		return []string{r.Topic, fmt.Sprint(r.Partition), r.Role, fmt.Sprint(r.Segments), fmt.Sprint(r.Bytes),
			fmt.Sprint(r.LogStartOffset), fmt.Sprint(r.LogEndOffset), orDash(r.Damage), repaired, orDash(r.LeaderDamage)}
	})(w, rows)
}
