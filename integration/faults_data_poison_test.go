package integration

// The data fault suite's poison batches (issue 27, item 4):
//
//   - poison-batch: raw Produce requests to a partition's leader, one per
//     case of poisonCases (poison_test.go: a gzip flag over raw records,
//     garbage records under a good CRC, counts that lie, a bad CRC, a
//     control batch, a zip bomb), between the producers' records. Each
//     must be refused with its Kafka error, or not reach a leader (the
//     leadership moved, a broker is down); one acknowledged fails the
//     run, and the final read finds any that was appended all the same (a
//     value the test's producers never sent).

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// dataPoison holds the poison batches, built once a process: the zip
// bomb takes a second or so to compress.
var dataPoison struct {
	once  sync.Once
	cases []poisonCase
}

// poisonBatch sends every poison batch to the leader of topic-part (or
// the broker leader names) and checks the answers.
func (r *dataRun) poisonBatch(t *testing.T, from time.Time, kind, topic string, part int32, leader func() (int32, string)) {
	dataPoison.once.Do(func() { dataPoison.cases = poisonCases(t) })
	id, how := leader()
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap(r.kafka)...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	if _, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl); err != nil {
		r.fault(from, "%s: no metadata from the brokers (%v): no poison sent", kind, err)
		return
	}
	var refused int
	var missed []string
	for _, pc := range dataPoison.cases {
		p, err := rawProduce(ctx, cl, id, topic, part, pc.batch)
		switch {
		case err != nil:
			missed = append(missed, fmt.Sprintf("%s: %v", pc.name, err))
		case p.ErrorCode == pc.want.Code:
			refused++
		case p.ErrorCode == 0:
			t.Errorf("%s: %s to %s %d for %s-%d was acknowledged at offset %d; want %v", kind, pc.name, how, id, topic, part, p.BaseOffset, pc.want)
		case p.ErrorCode == kerr.NotLeaderForPartition.Code, p.ErrorCode == kerr.UnknownTopicOrPartition.Code:
			missed = append(missed, fmt.Sprintf("%s: %v", pc.name, kerr.ErrorForCode(p.ErrorCode)))
		default:
			t.Errorf("%s: %s to %s %d for %s-%d: %v; want %v", kind, pc.name, how, id, topic, part, kerr.ErrorForCode(p.ErrorCode), pc.want)
		}
	}
	what := fmt.Sprintf("%s: %d poison batches to %s %d for %s-%d: %d refused as Kafka does", kind, len(dataPoison.cases), how, id, topic, part, refused)
	if len(missed) > 0 {
		what += "; not answered by its leader: " + strings.Join(missed, "; ")
	}
	r.fault(from, "%s", what)
}
