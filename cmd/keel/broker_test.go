package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// runKeel runs the keel command line in this process and returns stdout.
func runKeel(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// serveGRPC serves register's services on a free loopback port until the
// test ends.
func serveGRPC(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

type fakeListBrokers struct {
	keelpb.UnimplementedControllerServiceServer
	brokers []*keelpb.BrokerInfo
}

func (f *fakeListBrokers) ListBrokers(context.Context, *keelpb.ListBrokersRequest) (*keelpb.ListBrokersResponse, error) {
	return &keelpb.ListBrokersResponse{Brokers: f.brokers}, nil
}

type fakeInspect struct {
	keelpb.UnimplementedBrokerServiceServer
	resp *keelpb.InspectResponse
}

func (f *fakeInspect) Inspect(context.Context, *keelpb.InspectRequest) (*keelpb.InspectResponse, error) {
	return f.resp, nil
}

func TestBrokerList(t *testing.T) {
	fake := &fakeListBrokers{brokers: []*keelpb.BrokerInfo{
		{Id: 3, Epoch: 12, Address: "127.0.0.1:9203", State: "fenced"},
		{Id: 1, Epoch: 10, Address: "127.0.0.1:9201", KafkaAddress: "127.0.0.1:9092", Rack: "r1", State: "active", IncarnationId: "x"},
	}}
	addr := serveGRPC(t, func(g *grpc.Server) { keelpb.RegisterControllerServiceServer(g, fake) })

	out, err := runKeel(t, "broker", "list", "--controllers", addr, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	want := `[map[address:127.0.0.1:9201 epoch:10 id:1 kafka_address:127.0.0.1:9092 rack:r1 state:active] map[address:127.0.0.1:9203 epoch:12 id:3 kafka_address: rack: state:fenced]]`
	if got := fmt.Sprint(rows); got != want {
		t.Fatalf("broker list -o json = %s\nwant %s", got, want)
	}

	out, err = runKeel(t, "broker", "list", "--controllers", addr)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "KAFKA ADDRESS") ||
		!strings.HasPrefix(lines[1], "1 ") || !strings.Contains(lines[1], "127.0.0.1:9092") || !strings.Contains(lines[2], "fenced") {
		t.Fatalf("broker list =\n%s", out)
	}

	fake.brokers = nil
	if out, err = runKeel(t, "broker", "list", "--controllers", addr, "-o", "json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("no brokers: %q, %v", out, err)
	}
}

func TestBrokerInspect(t *testing.T) {
	fake := &fakeInspect{resp: &keelpb.InspectResponse{
		BrokerId: 2, BrokerEpoch: 7, ControllerId: 1, ControllerEpoch: 3, MetadataOffset: 42, ClusterId: "c", State: "active",
		Partitions: []*keelpb.ReplicaState{{Topic: "t", Partition: 0, Role: "leader", Leader: 2, LeaderEpoch: 1, Isr: []int32{2, 3}}},
	}}
	addr := serveGRPC(t, func(g *grpc.Server) { keelpb.RegisterBrokerServiceServer(g, fake) })

	out, err := runKeel(t, "broker", "inspect", "--address", addr, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	want := `map[broker_epoch:7 broker_id:2 cluster_id:c controller_epoch:3 controller_id:1 metadata_offset:42 ` +
		`partitions:[map[isr:[2 3] leader:2 leader_epoch:1 partition:0 role:leader topic:t]] state:active]`
	if s := fmt.Sprint(got); s != want {
		t.Fatalf("broker inspect -o json = %s\nwant %s", s, want)
	}

	// No replicas is an empty list, not null.
	fake.resp = &keelpb.InspectResponse{BrokerId: 2, ControllerId: -1, State: "registering"}
	if out, err = runKeel(t, "broker", "inspect", "--address", addr, "-o", "json"); err != nil || !strings.Contains(out, `"partitions": []`) {
		t.Fatalf("inspect without replicas: %s, %v", out, err)
	}
	if out, err = runKeel(t, "broker", "inspect", "--address", addr); err != nil || !strings.Contains(out, "Controller:       none") {
		t.Fatalf("inspect table: %s, %v", out, err)
	}
}

type fakeUnregister struct {
	keelpb.UnimplementedControllerServiceServer
	got []*keelpb.UnregisterBrokerRequest
}

func (f *fakeUnregister) UnregisterBroker(_ context.Context, req *keelpb.UnregisterBrokerRequest) (*keelpb.UnregisterBrokerResponse, error) {
	f.got = append(f.got, req)
	if req.GetBrokerId() == 2 {
		return nil, rpc.WithReason(codes.FailedPrecondition, rpc.ReasonBrokerNotFenced, "broker not fenced: broker 2 (epoch 9) is active; stop it first")
	}
	return &keelpb.UnregisterBrokerResponse{BrokerEpoch: 7}, nil
}

func TestBrokerUnregister(t *testing.T) {
	fake := &fakeUnregister{}
	addr := serveGRPC(t, func(g *grpc.Server) { keelpb.RegisterControllerServiceServer(g, fake) })
	out, err := runKeel(t, "broker", "unregister", "--broker-id", "1", "--controllers", addr)
	if err != nil || out != "unregistered broker 1 (epoch 7)\n" {
		t.Fatalf("unregister: %q, %v", out, err)
	}
	out, err = runKeel(t, "broker", "unregister", "--broker-id", "1", "--broker-epoch", "7", "--controllers", addr, "-o", "json")
	if err != nil || strings.Join(strings.Fields(out), "") != `{"broker_id":1,"broker_epoch":7}` {
		t.Fatalf("unregister -o json: %q, %v", out, err)
	}
	if len(fake.got) != 2 || fake.got[0].GetBrokerEpoch() != 0 || fake.got[1].GetBrokerEpoch() != 7 {
		t.Fatalf("requests %v; want epoch 0 (any), then 7", fake.got)
	}
	// A refusal comes back as one line with its reason's message.
	_, err = runKeel(t, "broker", "unregister", "--broker-id", "2", "--controllers", addr)
	if err == nil || !strings.Contains(errorLine(err), "FailedPrecondition: broker not fenced: broker 2 (epoch 9) is active; stop it first") {
		t.Fatalf("unregister of an active broker: %v", err)
	}
}

func TestBrokerCommandErrors(t *testing.T) {
	// A data dir that broker 2 has claimed.
	taken := t.TempDir()
	if err := os.WriteFile(filepath.Join(taken, "meta.json"), []byte(`{"format":1,"broker_id":2}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no broker id", []string{"broker", "--listen", "127.0.0.1:0", "--data-dir", "d"}, "--broker-id is required"},
		{"no data dir", []string{"broker", "--broker-id", "1", "--listen", "127.0.0.1:0"}, "--data-dir is required"},
		{"no listen", []string{"broker", "--broker-id", "1", "--data-dir", "d"}, "--listen is required"},
		{"no controllers", []string{"broker", "--broker-id", "1", "--data-dir", "d", "--listen", "127.0.0.1:0", "--controllers", " , "}, "--controllers: no controller address"},
		{"no heartbeat interval", []string{"broker", "--broker-id", "1", "--data-dir", "d", "--listen", "127.0.0.1:0", "--heartbeat-interval", "0s"}, "--heartbeat-interval 0s"},
		{"no controlled shutdown timeout", []string{"broker", "--broker-id", "1", "--data-dir", "d", "--listen", "127.0.0.1:0", "--controlled-shutdown-timeout", "0s"}, "--controlled-shutdown-timeout 0s"},
		{"no replica lag time", []string{"broker", "--broker-id", "1", "--data-dir", "d", "--listen", "127.0.0.1:0", "--replica-lag-time-max", "-1s"}, "--replica-lag-time-max -1s"},
		{"no replica fetch interval", []string{"broker", "--broker-id", "1", "--data-dir", "d", "--listen", "127.0.0.1:0", "--replica-fetch-interval", "0s"}, "--replica-fetch-interval 0s"},
		{"no Kafka fetch wait", []string{"broker", "--broker-id", "1", "--data-dir", "d", "--listen", "127.0.0.1:0", "--kafka-fetch-max-wait", "0s"}, "--kafka-fetch-max-wait 0s"},
		{"a super user without User:", []string{"broker", "--broker-id", "1", "--data-dir", "d", "--listen", "127.0.0.1:0", "--kafka-super-users", "User:ops,ops"}, `--kafka-super-users: principal "ops" is not of the form User:NAME`},
		{"another broker's data dir", []string{"broker", "--broker-id", "1", "--data-dir", taken, "--listen", "127.0.0.1:0"}, "belongs to broker 2, not broker 1"},
		{"unknown subcommand", []string{"broker", "lst"}, `unknown command "lst" for "keel broker"`},
		{"inspect without an address", []string{"broker", "inspect"}, "--address is required"},
		{"inspect with a bad output", []string{"broker", "inspect", "--address", "127.0.0.1:1", "-o", "yaml"}, `-o "yaml"`},
		{"list with a bad output", []string{"broker", "list", "-o", "yaml"}, `-o "yaml"`},
		{"unregister without a broker id", []string{"broker", "unregister"}, "--broker-id is required"},
		{"unregister with a negative epoch", []string{"broker", "unregister", "--broker-id", "1", "--broker-epoch", "-3"}, "--broker-epoch -3"},
		{"dev with negative brokers", []string{"dev", "--brokers-count", "-1"}, "--brokers-count -1"},
		{"connection bounds over the open-files limit", []string{"broker", "--broker-id", "1", "--data-dir", "d", "--listen", "127.0.0.1:0",
			"--kafka-listen", "127.0.0.1:0", "--kafka-max-connections", "1073741824"}, "--kafka-max-connections 1073741824 leave no room"},
		{"a reserve over the open-files limit", []string{"broker", "--broker-id", "1", "--data-dir", "d", "--listen", "127.0.0.1:0",
			"--reserved-files", "1073741824"}, "with 1073741824 kept for the logs (--reserved-files)"},
		{"a negative bound per address", []string{"broker", "--broker-id", "1", "--data-dir", "d", "--listen", "127.0.0.1:0",
			"--max-connections-per-ip", "-1"}, "--max-connections-per-ip -1: want a positive number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runKeel(t, tt.args...)
			if err == nil || !strings.Contains(errorLine(err), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestRequiredFlags_HelpShowsNoPlaceholder: a required flag's placeholder
// default is not in --help, but parses and prints as before.
func TestRequiredFlags_HelpShowsNoPlaceholder(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		flag   string
		suffix string
	}{
		{[]string{"broker", "--help"}, "--broker-id int32", "(required)"},
		{[]string{"broker", "drain", "--help"}, "--broker-id int32", "(required)"},
		{[]string{"partition", "reassign", "--help"}, "--partition int32", "(the single form)"},
	} {
		out, err := runKeel(t, tt.args...)
		if err != nil {
			t.Fatal(err)
		}
		var line string
		for l := range strings.Lines(out) {
			if strings.Contains(l, tt.flag) {
				line = strings.TrimSpace(l)
			}
		}
		if !strings.HasSuffix(line, tt.suffix) {
			t.Errorf("keel %s: %s's line is %q, want it to end in %s, with no default", strings.Join(tt.args, " "), tt.flag, line, tt.suffix)
		}
	}
	out, err := runKeel(t, "broker", "--print-config")
	if err != nil || !strings.Contains(out, "broker-id: -1 # default\n") {
		t.Errorf("broker --print-config: %v\n%s", err, out)
	}
}

// TestDialVia: --test-dial-via (test wiring) parses ADDR=VIA pairs, refuses
// a malformed one naming it, and its dialer goes to VIA for ADDR.
func TestDialVia(t *testing.T) {
	for _, bad := range []string{"127.0.0.1:1", "=127.0.0.1:2", "127.0.0.1:1="} {
		if _, err := dialVia(bad); err == nil || !strings.Contains(err.Error(), "--test-dial-via") {
			t.Errorf("dialVia(%q): %v; want an error naming --test-dial-via", bad, err)
		}
	}
	if d, err := dialVia(""); d != nil || err != nil {
		t.Errorf("dialVia(\"\"): %v, %v; want no dialer", d != nil, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// Port 1 on loopback refuses: only the rewrite makes the dial work.
	dial, err := dialVia("127.0.0.1:1=" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dial(ctx, "127.0.0.1:1")
	if err != nil {
		t.Fatalf("dial through the rewrite: %v", err)
	}
	c.Close()
}
