package integration

// Metrics and health: controllers and brokers started with --metrics-addr
// are scraped over HTTP as Prometheus would, their /readyz read, and their
// gRPC ports asked for health (grpc.health.v1) and their services
// (reflection), while brokers die.

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/keel-dev/keel/internal/poll"
	"github.com/keel-dev/keel/keeltest/keelproc"
	"github.com/keel-dev/keel/proto/keelpb"
)

// withMetrics gives every controller a --metrics-addr of its own
// (keelproc.Node.MetricsAddr).
func withMetrics() clusterOption {
	return func(o *clusterOptions) { o.cfg.Metrics = true }
}

// withBrokerMetrics gives a broker a --metrics-addr of its own.
func withBrokerMetrics() brokerOption {
	return func(s *keelproc.BrokerSpec) { s.Metrics = true }
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// scrape is one /metrics answer, parsed: series name{labels} → value (a
// histogram gives its sample count).
type scrape map[string]float64

// scrapeMetrics reads http://addr/metrics as Prometheus does.
func scrapeMetrics(addr string) (scrape, error) {
	return scrapeURL(httpClient, "http://"+addr+"/metrics")
}

// scrapeURL reads url with cl as Prometheus does.
func scrapeURL(cl *http.Client, url string) (scrape, error) {
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %v", url, err)
	}
	out := scrape{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			out[seriesKey(name, m)] = sampleValue(m)
		}
	}
	return out, nil
}

func seriesKey(name string, m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return name
	}
	labels := make([]string, 0, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(labels)
	return name + "{" + strings.Join(labels, ",") + "}"
}

func sampleValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// get reads an HTTP endpoint: its status code and body.
func get(url string) (int, string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// scrapeAll scrapes every address in addrs (by id), describing what it saw.
func scrapeAll(addrs map[int32]string, names ...string) (map[int32]scrape, string) {
	out := map[int32]scrape{}
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(addrs)) {
		s, err := scrapeMetrics(addrs[id])
		if err != nil {
			fmt.Fprintf(&b, "  %d: %v\n", id, err)
			continue
		}
		out[id] = s
		fmt.Fprintf(&b, "  %d:", id)
		for _, n := range names {
			fmt.Fprintf(&b, " %s=%v", n, s[n])
		}
		b.WriteString("\n")
	}
	return out, b.String()
}

func dialPlain(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// healthStatus asks a gRPC server's health service about service.
func healthStatus(cc *grpc.ClientConn, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), describeLimit)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return resp.GetStatus(), err
}

// reflectedServices lists a gRPC server's services through reflection, as
// `grpcurl -plaintext HOST:PORT list` does.
func reflectedServices(cc *grpc.ClientConn) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), describeLimit)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

// waitServing polls a gRPC server's health until service is SERVING.
func waitServing(t *testing.T, name, addr, service string) {
	t.Helper()
	cc := dialPlain(t, addr)
	poll.UntilState(t, brokersTimeout, fmt.Sprintf("%s's health for %q to be SERVING", name, service), func() (bool, string) {
		st, err := healthStatus(cc, service)
		return err == nil && st == healthpb.HealthCheckResponse_SERVING, fmt.Sprintf("%v, %v", st, err)
	})
}

// waitReadyz polls a metrics server's /readyz until it answers 200.
func waitReadyz(t *testing.T, name, addr string) {
	t.Helper()
	poll.UntilState(t, brokersTimeout, name+"'s /readyz to answer 200", func() (bool, string) {
		code, body, err := get("http://" + addr + "/readyz")
		return err == nil && code == http.StatusOK, fmt.Sprintf("%d %q %v", code, strings.TrimSpace(body), err)
	})
	if code, _, err := get("http://" + addr + "/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("%s's /healthz: %d, %v; want 200", name, code, err)
	}
}

// TestMetrics_ControllersAndBrokers runs three controllers and three brokers
// with --metrics-addr and checks what they report as the cluster changes:
// one active controller; ready, SERVING nodes that list their services;
// a topic on one broker; the broker killed, so fenced after its session,
// and its partition offline.
func TestMetrics_ControllersAndBrokers(t *testing.T) {
	c := startCluster(t, 3, withSessionTimeout(testSessionTimeout), withLeaderImbalanceCheck(-time.Second), withMetrics())
	ctrlMetrics := map[int32]string{}
	for _, id := range c.IDs() {
		ctrlMetrics[id] = c.node(id).MetricsAddr()
	}
	c.WaitForActive(t, activeTimeout)
	brokerMetrics := map[int32]string{}
	for _, id := range []int32{1, 2, 3} {
		c.StartBroker(id, withRack(fmt.Sprintf("r%d", id)), withBrokerMetrics())
		brokerMetrics[id] = c.broker(id).MetricsAddr()
	}
	c.WaitForBrokers(t, allActive(1, 2, 3))

	// One active controller in the quorum; every controller's image has the
	// three brokers active.
	const (
		active     = "keel_controller_active_controller_count"
		fenced     = "keel_controller_fenced_broker_count"
		brokers    = "keel_controller_active_broker_count"
		offline    = "keel_controller_offline_partitions_count"
		topics     = "keel_controller_global_topic_count"
		partitions = "keel_controller_global_partition_count"
		epoch      = "keel_controller_epoch"
		applied    = "keel_raft_applied_index"
	)
	poll.UntilState(t, brokersTimeout, "one active controller and three active brokers in the controllers' metrics", func() (bool, string) {
		s, desc := scrapeAll(ctrlMetrics, active, brokers, fenced, epoch, applied)
		sum := 0.0
		ok := len(s) == 3
		for _, m := range s {
			sum += m[active]
			ok = ok && m[brokers] == 3 && m[fenced] == 0 && m[epoch] >= 1 && m[applied] > 0 && m[offline] == 0
		}
		return ok && sum == 1, desc
	})
	// The active controller observed its own writes on the hot path.
	s, desc := scrapeAll(ctrlMetrics)
	if len(s) != len(ctrlMetrics) {
		t.Fatalf("scraped %d of %d controllers:\n%s", len(s), len(ctrlMetrics), desc)
	}
	for id, m := range s {
		if m[active] == 1 && (m["keel_controller_event_queue_time_seconds"] == 0 || m["keel_raft_commit_time_seconds"] == 0) {
			t.Errorf("active controller %d: event queue time %v samples, commit time %v samples; want some",
				id, m["keel_controller_event_queue_time_seconds"], m["keel_raft_commit_time_seconds"])
		}
		if m["go_goroutines"] == 0 || m["keel_raft_term"] < 1 {
			t.Errorf("controller %d lacks the Go runtime or raft metrics", id)
		}
	}

	// Ready and SERVING everywhere; reflection lists the keel services.
	for _, id := range c.IDs() {
		name := fmt.Sprintf("controller %d", id)
		waitReadyz(t, name, ctrlMetrics[id])
		waitServing(t, name, c.Addr(id), "")
		waitServing(t, name, c.Addr(id), keelpb.ControllerService_ServiceDesc.ServiceName)
	}
	for _, id := range c.BrokerIDs() {
		name := fmt.Sprintf("broker %d", id)
		waitReadyz(t, name, brokerMetrics[id])
		waitServing(t, name, c.BrokerAddr(id), keelpb.BrokerService_ServiceDesc.ServiceName)
	}
	for addr, want := range map[string]string{
		c.Addr(1):       keelpb.ControllerService_ServiceDesc.ServiceName,
		c.BrokerAddr(1): keelpb.BrokerService_ServiceDesc.ServiceName,
	} {
		names, err := reflectedServices(dialPlain(t, addr))
		if err != nil {
			t.Fatalf("reflection at %s: %v", addr, err)
		}
		for _, w := range []string{want, healthpb.Health_ServiceDesc.ServiceName} {
			if !slices.Contains(names, w) {
				t.Errorf("reflection at %s lists %v, without %s", addr, names, w)
			}
		}
	}

	// The broker's own metrics.
	b1, err := scrapeMetrics(brokerMetrics[1])
	if err != nil {
		t.Fatal(err)
	}
	for name, ok := range map[string]bool{
		`keel_broker_state{state="active"}`:      b1[`keel_broker_state{state="active"}`] == 1,
		`keel_broker_state{state="fenced"}`:      b1[`keel_broker_state{state="fenced"}`] == 0,
		"keel_broker_epoch":                      b1["keel_broker_epoch"] > 0,
		"keel_broker_metadata_offset":            b1["keel_broker_metadata_offset"] > 0,
		"keel_broker_controller_epoch":           b1["keel_broker_controller_epoch"] >= 1,
		"keel_broker_heartbeat_duration_seconds": b1["keel_broker_heartbeat_duration_seconds"] > 0,
		"go_goroutines":                          b1["go_goroutines"] > 0,
	} {
		if !ok {
			t.Errorf("broker 1: %s = %v", name, b1[name])
		}
	}

	// A topic whose only replica is on broker 3.
	c.createTopic(t, "on-three", "--assignment", "0:3")
	poll.UntilState(t, partitionTimeout, "every controller to count the topic, online", func() (bool, string) {
		s, desc := scrapeAll(ctrlMetrics, topics, partitions, offline)
		ok := len(s) == 3
		for _, m := range s {
			ok = ok && m[topics] == 1 && m[partitions] == 1 && m[offline] == 0
		}
		return ok, desc
	})
	poll.UntilState(t, partitionTimeout, "broker 3 to lead its replica", func() (bool, string) {
		s, desc := scrapeAll(map[int32]string{3: brokerMetrics[3]}, `keel_broker_replicas{role="leader"}`)
		return s[3][`keel_broker_replicas{role="leader"}`] == 1, desc
	})

	// Broker 3 dies: fenced once its session runs out, and its partition,
	// with no replica left, offline.
	c.KillBroker(3)
	poll.UntilState(t, partitionTimeout, "every controller to count broker 3 fenced and its partition offline", func() (bool, string) {
		s, desc := scrapeAll(ctrlMetrics, fenced, brokers, offline)
		ok := len(s) == 3
		for _, m := range s {
			ok = ok && m[fenced] == 1 && m[brokers] == 2 && m[offline] == 1
		}
		return ok, desc
	})
	// The other brokers stay ready.
	for _, id := range []int32{1, 2} {
		waitReadyz(t, fmt.Sprintf("broker %d", id), brokerMetrics[id])
	}
}
