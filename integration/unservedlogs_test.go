package integration

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A client that asks again and again for an API Keel does not serve
// (transactions here), or a version of one, gets Kafka's answer each time,
// is counted each time in keel_kafka_unserved_requests_total, and is logged
// once per API, not once a request.
func TestLogs_UnservedAPICountedAndLoggedOnce(t *testing.T) {
	c := startCluster(t, 1)
	c.WaitForActive(t, activeTimeout)
	addr := freeAddrs(t, 1)[0]
	c.startBrokers([]int32{1}, [][]brokerOption{{withBrokerMetrics(), withBrokerFlags("--kafka-listen=" + addr)}})
	c.WaitForBrokers(t, allActive(1))

	const conns, requests = 2, 4
	req := kmsg.NewPtrEndTxnRequest()
	req.Version, req.TransactionalID, req.ProducerID, req.Commit = 1, "tx", 1, true
	for range conns {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for i := range requests {
			// Header v1: key, version, correlation id, client id.
			b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
			b = binary.BigEndian.AppendUint16(b, uint16(req.Version))
			b = binary.BigEndian.AppendUint32(b, uint32(i))
			b = append(binary.BigEndian.AppendUint16(b, uint16(len("legacy-app"))), "legacy-app"...)
			b = req.AppendTo(b)
			if _, err := conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			var size [4]byte
			if _, err := io.ReadFull(conn, size[:]); err != nil {
				t.Fatalf("EndTxn %d: no answer: %v", i, err)
			}
			body := make([]byte, binary.BigEndian.Uint32(size[:]))
			if _, err := io.ReadFull(conn, body); err != nil {
				t.Fatal(err)
			}
			resp := kmsg.NewPtrEndTxnResponse()
			resp.Version = req.Version
			if err := resp.ReadFrom(body[4:]); err != nil || resp.ErrorCode == 0 {
				t.Fatalf("EndTxn %d: answered %+v (%v), want UNSUPPORTED_VERSION", i, resp, err)
			}
		}
		conn.Close()
	}

	// A version Keel does not serve closes the connection, as Kafka does;
	// the client reconnects and asks again.
	for range conns {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b := binary.BigEndian.AppendUint16(nil, 3) // Metadata
		b = binary.BigEndian.AppendUint16(b, 99)
		b = binary.BigEndian.AppendUint32(b, 1)
		b = append(binary.BigEndian.AppendUint16(b, uint16(len("legacy-app"))), "legacy-app"...)
		if _, err := conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Fatal("Metadata v99 was answered; want the connection closed")
		}
		conn.Close()
	}

	m, err := scrapeMetrics(c.broker(1).MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	if got := m[`keel_kafka_unserved_requests_total{api="EndTxn"}`]; got != conns*requests {
		t.Errorf(`keel_kafka_unserved_requests_total{api="EndTxn"} = %v, want %d`, got, conns*requests)
	}
	if got := m[`keel_kafka_unserved_requests_total{api="Metadata"}`]; got != conns {
		t.Errorf(`keel_kafka_unserved_requests_total{api="Metadata"} = %v, want %d`, got, conns)
	}
	log := logText(t, c.broker(1))
	for _, api := range []string{"EndTxn", "Metadata"} {
		var lines []string
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, api) && !strings.Contains(line, "level=DEBUG") {
				lines = append(lines, line)
			}
		}
		if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "client_id=legacy-app") {
			t.Errorf("%d lines about %s, want one WARN naming the client:\n%s", len(lines), api, strings.Join(lines, "\n"))
		}
	}
}
