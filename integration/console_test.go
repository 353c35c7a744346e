package integration

// The console (issue 32) of real controllers: what its JSON shows of a
// cluster with a stopped broker, and who may see it on a TLS cluster.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

// consoleOverview is the part of /console/api/overview these tests read.
type consoleOverview struct {
	Source struct {
		NodeID       int32  `json:"node_id"`
		Active       bool   `json:"active"`
		AppliedIndex uint64 `json:"applied_index"`
	} `json:"source"`
	ClusterID string `json:"cluster_id"`
	Voters    []struct {
		ID     int32 `json:"id"`
		Leader bool  `json:"leader"`
	} `json:"voters"`
	Brokers []struct {
		ID    int32  `json:"id"`
		State string `json:"state"`
		Rack  string `json:"rack"`
	} `json:"brokers"`
	Counts struct {
		Partitions      int `json:"partitions"`
		UnderReplicated int `json:"under_replicated"`
		FencedBrokers   int `json:"fenced_brokers"`
	} `json:"counts"`
}

// consoleTopics is the part of /console/api/topics these tests read.
type consoleTopics struct {
	Total  int `json:"total"`
	Topics []struct {
		Name            string `json:"name"`
		UnderReplicated int    `json:"under_replicated"`
	} `json:"topics"`
}

// getBody GETs url with cl and returns the status and body.
func getBody(cl *http.Client, url string) (int, string, error) {
	resp, err := cl.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// consoleJSON GETs url with cl and decodes a 200's body into v.
func consoleJSON(cl *http.Client, url string, v any) error {
	code, body, err := getBody(cl, url)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("%d %s", code, strings.TrimSpace(body))
	}
	return json.Unmarshal([]byte(body), v)
}

// TestConsole_ShowsAStoppedBrokerOnATLSCluster: 3 controllers and 3
// brokers over mutual TLS, a topic on every broker, broker 3 stopped:
// every controller's console shows it fenced and the topic's partitions
// under-replicated, the active controller's as its own view and each
// follower's as the follower's. An admin's and a broker's certificate are
// served; a probe's, which may scrape the same listener, is refused 403 in
// one line, page and data alike.
func TestConsole_ShowsAStoppedBrokerOnATLSCluster(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	c, leader, _ := startBrokerClusterWith(t, 3, []clusterOption{withTLS(pki), withMetrics()}, 1, 2, 3)
	c.createTopic(t, "console-orders", "--partitions", "3", "--replication-factor", "3")
	c.StopBroker(3)
	c.WaitForBrokers(t, map[int32]string{1: "active", 2: "active", 3: "fenced"})

	https := func(cn string) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: pki.config(cn).Client()}}
	}
	admin, broker, probe := https("admin"), https("broker-2"), https("probe-prometheus")
	for _, id := range c.IDs() {
		base := "https://" + c.node(id).MetricsAddr() + "/console/"
		var o consoleOverview
		poll.UntilState(t, brokersTimeout, fmt.Sprintf("controller %d's console to show broker 3 fenced and 3 partitions under-replicated", id), func() (bool, string) {
			if err := consoleJSON(admin, base+"api/overview", &o); err != nil {
				return false, err.Error()
			}
			fenced := false
			for _, b := range o.Brokers {
				fenced = fenced || b.ID == 3 && b.State == "fenced"
			}
			return fenced && o.Counts.UnderReplicated == 3 && o.Counts.FencedBrokers == 1, fmt.Sprintf("%+v", o)
		})
		if o.Source.NodeID != id || o.Source.Active != (id == leader) || o.Source.AppliedIndex == 0 || o.ClusterID == "" {
			t.Errorf("controller %d's console: source %+v, cluster %q; want its own view, active only on %d", id, o.Source, o.ClusterID, leader)
		}
		if len(o.Brokers) != 3 || o.Brokers[0].Rack != "r1" || len(o.Voters) != 3 {
			t.Errorf("controller %d's console: brokers %+v, voters %+v", id, o.Brokers, o.Voters)
		}
		var tp consoleTopics
		if err := consoleJSON(broker, base+"api/topics?unhealthy=1", &tp); err != nil {
			t.Fatalf("a broker's certificate: GET %sapi/topics: %v", base, err)
		}
		if tp.Total != 1 || tp.Topics[0].Name != "console-orders" || tp.Topics[0].UnderReplicated != 3 {
			t.Errorf("controller %d's unhealthy topics: %+v", id, tp)
		}
		if code, body, err := getBody(admin, base); err != nil || code != http.StatusOK || !strings.Contains(body, `src="console.js"`) {
			t.Errorf("an admin's GET %s: %d, %v: %.200s", base, code, err, body)
		}
		for _, path := range []string{"", "api/overview"} {
			code, body, err := getBody(probe, base+path)
			if err != nil || code != http.StatusForbidden || !strings.Contains(body, "probe certificate") || strings.Count(strings.TrimSpace(body), "\n") > 0 {
				t.Errorf("a probe's GET %s%s: %d %q, %v; want 403 in one line naming the probe certificate", base, path, code, body, err)
			}
		}
		// The probe still scrapes the same listener.
		if code, _, err := getBody(probe, "https://"+c.node(id).MetricsAddr()+"/metrics"); err != nil || code != http.StatusOK {
			t.Errorf("a probe's GET /metrics: %d, %v", code, err)
		}
	}
	// / sends a browser to the console.
	noRedirect := https("admin")
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noRedirect.Get("https://" + c.node(leader).MetricsAddr() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/console/" {
		t.Errorf("GET /: %d to %q, want 302 to /console/", resp.StatusCode, resp.Header.Get("Location"))
	}
}
