package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/broker"
	"github.com/keel-dev/keel/broker/node"
	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest"
)

// runKeelIn runs the keel command line with stdin.
func runKeelIn(t *testing.T, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetIn(stdin)
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// startKafkaBroker runs a one-controller quorum and broker 1 with its
// replicated data plane and Kafka listener, assembled as keel broker
// --kafka-listen assembles one (broker/node), and returns the controllers'
// addresses and the Kafka bootstrap address.
func startKafkaBroker(t *testing.T) (controllers, bootstrap string) {
	t.Helper()
	c := keeltest.NewCluster(t, 1)
	c.WaitForActive(10 * time.Second)
	dir := t.TempDir()
	n, err := node.Start(node.Config{
		Agent: broker.Config{BrokerID: 1, Listen: "127.0.0.1:0", DataDir: dir, Controllers: c.Addrs(),
			HeartbeatInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)},
		KafkaListen: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	a := n.Agent()
	poll.Until(t, 10*time.Second, "broker 1 active", func() bool { return a.Status().State == broker.StateActive })
	controllers = strings.Join(c.Addrs(), ",")
	if _, err := runKeel(t, "topic", "create", "events", "--partitions", "2", "--replication-factor", "1", "--controllers", controllers); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the topic in broker 1's image", func() bool {
		_, ok := a.Image().Topic("events")
		return ok
	})
	return controllers, n.KafkaAddr()
}

func TestProduceConsume(t *testing.T) {
	_, bootstrap := startKafkaBroker(t)

	out, err := runKeelIn(t, strings.NewReader("u1:signed up\nu2:paid\nno key here\n"),
		"produce", "--topic", "events", "--key-sep", ":", "--bootstrap", bootstrap)
	if err != nil || !strings.Contains(out, "produced 3 records to events") {
		t.Fatalf("produce: %v\n%s", err, out)
	}

	out, err = runKeel(t, "consume", "--topic", "events", "--from-beginning", "--max", "3", "-o", "json", "--bootstrap", bootstrap)
	if err != nil {
		t.Fatalf("consume: %v\n%s", err, out)
	}
	got := map[string]consumedRecord{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r consumedRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v in %q", err, line)
		}
		if r.Topic != "events" || r.Partition < 0 || r.Partition > 1 || r.Offset < 0 || r.Timestamp == "" {
			t.Fatalf("record %+v", r)
		}
		got[r.Value] = r
	}
	if len(got) != 3 || got["signed up"].Key != "u1" || got["paid"].Key != "u2" || got["no key here"].Key != "" {
		t.Fatalf("consumed %+v", got)
	}

	// One partition, as text.
	p := got["paid"].Partition
	out, err = runKeel(t, "consume", "--topic", "events", "--partition", string(rune('0'+p)), "--from-beginning", "--max", "1", "--bootstrap", bootstrap)
	if err != nil || !strings.HasPrefix(out, "partition "+string(rune('0'+p))+" offset 0") {
		t.Fatalf("consume one partition: %v\n%s", err, out)
	}

	// acks=1 without idempotence also lands.
	if out, err := runKeelIn(t, strings.NewReader("again\n"), "produce", "--topic", "events", "--acks", "1", "--bootstrap", bootstrap); err != nil {
		t.Fatalf("produce --acks 1: %v\n%s", err, out)
	}
}

func TestProduceConsume_Refusals(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no topic", []string{"produce", "--bootstrap", "127.0.0.1:1"}, "--topic is required"},
		{"bad acks", []string{"produce", "--topic", "t", "--acks", "2"}, `--acks "2": want all, 1 or 0`},
		{"no bootstrap", []string{"consume", "--topic", "t", "--bootstrap", " , "}, "--bootstrap: no address given"},
		{"bad output", []string{"consume", "--topic", "t", "-o", "yaml"}, `-o "yaml": want text or json`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runKeelIn(t, strings.NewReader(""), tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
