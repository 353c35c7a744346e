package kafka

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// BenchmarkProduce_QuotaCost: what the quota code costs a produce round
// trip (acks=1, one 1 KiB batch, raw frames on loopback, memory backend)
// on a broker with no quota set, against the same listener without the
// quota code, measured in alternating rounds of the same run so that the
// machine's load falls on both alike. It reports each one's median and
// their ratio; with a quota set (that never throttles) for reference.
//
//	go test -run '^$' -bench BenchmarkProduce_QuotaCost -benchtime 20000x ./broker/kafka/
func BenchmarkProduce_QuotaCost(b *testing.B) {
	type variant struct {
		name string
		conn net.Conn
		ns   []float64
	}
	start := func(name string, off, set bool) *variant {
		meta := newFakeMeta(b)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		s, err := Serve(lis, Config{BrokerID: 1, Image: meta, Backend: NewMemoryBackend(), Controller: meta, Logger: testLogger(b), noQuotas: off})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		meta.addBroker(1, s.Addr())
		meta.createTopic("t", []int32{1})
		if set {
			e := fsm.QuotaEntity{ClientID: fsm.Named("someone-else")}
			meta.must(&keelpb.Record{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: fsm.ClientQuotaMetadataVersion}}},
				&keelpb.Record{Record: &keelpb.Record_ClientQuota{ClientQuota: &keelpb.ClientQuotaRecord{Entity: e.Data(), Key: fsm.ProducerByteRate, Value: 1e12}}})
		}
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return &variant{name: name, conn: c}
	}
	variants := []*variant{start("no-quota-code", true, false), start("no-quotas", false, false), start("quota-set", false, true)}
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 7, 1, 5000
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: "t", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: batchOf(make([]byte, 1024))}}}}
	f := frame(0, 7, 1, req.AppendTo(nil))
	roundTrip := func(c net.Conn) {
		if _, err := c.Write(f); err != nil {
			b.Fatal(err)
		}
		readFrame(b, c)
	}
	const rounds = 20
	per := max(b.N/rounds, 1)
	b.ResetTimer()
	for range rounds {
		for _, v := range variants {
			t0 := time.Now()
			for range per {
				roundTrip(v.conn)
			}
			v.ns = append(v.ns, float64(time.Since(t0).Nanoseconds())/float64(per))
		}
	}
	b.StopTimer()
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	base := median(variants[0].ns)
	for _, v := range variants {
		m := median(v.ns)
		b.ReportMetric(m, "ns/produce-"+v.name)
		if v != variants[0] {
			b.ReportMetric(m/base, fmt.Sprintf("ratio-%s", v.name))
		}
	}
}
