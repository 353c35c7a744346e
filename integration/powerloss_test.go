package integration

import (
	"slices"
	"strings"
	"testing"
)

// TestReplication_PowerLossOfLastISRMemberWaitsForELR is issue 26's
// power loss (KIP-966's unclean shutdown rule), with real processes: an
// RF-3 topic with min.insync.replicas=2 on brokers 1, 2, 3. Broker 3 stops;
// an idempotent acks=all producer writes with ISR [1 2]; broker 2 is paused
// past its session, so that ISR [1] and ELR [2]: broker 2 holds every
// acknowledged record. Broker 1 then loses power: killed, its logs cut back
// to their last fsync (keelproc's PowerLoss; the brokers do not fsync each
// write), and started again, reporting an unclean shutdown. It must leave
// the ISR, even as its last member: the partition stays without a leader
// once broker 1 is back and active, and topic describe says it waits for
// ELR 2. Broker 2 resumes and leads (a clean election from the ELR); broker
// 1 follows it and rejoins the ISR, and the partition takes writes again.
// Every acknowledged record is read back at its offset: none is lost.
// Keeping broker 1 as the ISR's last member (before metadata.version 3)
// lost every one of them: it led with its cut log and broker 2 truncated to
// it.
func TestReplication_PowerLossOfLastISRMemberWaitsForELR(t *testing.T) {
	t.Parallel()
	c, kafka := startKafkaCluster(t, threeBrokers)
	const topic = "powerloss"
	c.createTopic(t, topic, "--assignment", "0:1,2,3", "--config", "min.insync.replicas=2")
	c.WaitForTopic(t, topic, "led by broker 1 with a full ISR", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 1 && len(p.ISR) == 3
	})
	c.StopBroker(3)
	c.WaitForTopic(t, topic, "led by broker 1, ISR [1 2], no ELR", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 1 && sameSet(p.ISR, []int32{1, 2}) && len(p.ELR) == 0
	})

	var produced producedLog
	produce := func(tag string, n int, what string) { t.Helper(); produced.produce(t, kafka, topic, tag, n, what) }
	produce("a", 200, "ISR [1 2]")
	ackedBefore := len(produced.acked)

	c.PauseBroker(2)
	c.WaitForTopic(t, topic, "led by broker 1, ISR [1], ELR [2] (broker 2 paused past its session)", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader == 1 && slices.Equal(p.ISR, []int32{1}) && slices.Equal(p.ELR, []int32{2})
	})
	old := c.WaitForBrokers(t, map[int32]string{1: stateActive, 2: stateFenced, 3: stateFenced})[1].GetEpoch()
	cuts, err := c.h.PowerLoss(c.broker(1))
	if err != nil {
		t.Fatal(err)
	}
	dropped := int64(0)
	for _, cut := range cuts {
		dropped += cut.Before - cut.After
		t.Logf("broker %d's power loss cut %s from log end %d to %d", cut.Broker, cut.Dir, cut.Before, cut.After)
	}
	if len(cuts) != 1 || dropped == 0 {
		t.Fatalf("broker 1's power loss cut %+v: want its one log cut, some records gone (else this test proves nothing)", cuts)
	}

	c.RestartBroker(1)
	c.WaitForReregistered(t, map[int32]string{1: stateActive, 2: stateFenced, 3: stateFenced}, 1, old)
	// Broker 1's unfencing elected whatever it could: nothing may lead
	// while broker 2, the only replica known to hold everything, is away.
	down := c.cliDescribe(t, topic).partition(t, 0)
	if down.Leader != noLeader || len(down.ISR) != 0 || !slices.Equal(down.ELR, []int32{2}) ||
		!strings.Contains(down.NoLeaderReason, "waiting for an eligible replica (ELR 2: fenced) to return") {
		t.Errorf("with broker 1 back after its power loss and broker 2 paused: %s; want no leader, ISR [], ELR [2], and a reason naming ELR 2", down)
	}

	c.ResumeBroker(2)
	up := c.WaitForTopic(t, topic, "led, with brokers 1 and 2 in the ISR", func(d topicJSON) bool {
		p := d.Partitions[0]
		return p.Leader > 0 && sameSet(p.ISR, []int32{1, 2})
	}).partition(t, 0)
	if up.Leader != 2 {
		t.Errorf("with broker 2 back: %s; want it led by broker 2, the eligible replica that held every acknowledged record", up)
	}
	produce("b", 50, "broker 2 leading, ISR [1 2]")

	reader := kafkaClient(t, kafka)
	hw := highWatermarks(t, reader, topic, 1)
	read := consumeAll(t, kafka, topic, hw)
	bad, lost, found, unacked := ackedRecordViolations(produced.sent, produced.acked, hw, read, nil)
	for i, v := range bad {
		if i == 5 {
			t.Errorf("... and %d more", len(bad)-i)
			break
		}
		t.Error(v.msg)
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged records lost (%d acknowledged before the power loss)", lost, len(produced.acked), ackedBefore)
	}
	t.Logf("broker 1's power loss dropped %d offsets; %d records acknowledged (%d before it), %d found, %d lost, %d read that were never acknowledged; high watermark %d",
		dropped, len(produced.acked), ackedBefore, found, lost, unacked, hw[0])
}
