package console

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

var (
	tidOrders = fsm.TopicID{0x1}
	tidAudit  = fsm.TopicID{0x2}
)

func rec(r any) *keelpb.Record {
	switch r := r.(type) {
	case *keelpb.BrokerRegistrationRecord:
		return &keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: r}}
	case *keelpb.UnfenceBrokerRecord:
		return &keelpb.Record{Record: &keelpb.Record_UnfenceBroker{UnfenceBroker: r}}
	case *keelpb.TopicRecord:
		return &keelpb.Record{Record: &keelpb.Record_Topic{Topic: r}}
	case *keelpb.PartitionRecord:
		return &keelpb.Record{Record: &keelpb.Record_Partition{Partition: r}}
	}
	panic("no such record")
}

func part(tid fsm.TopicID, p, leader int32, replicas, isr []int32) *keelpb.PartitionRecord {
	return &keelpb.PartitionRecord{TopicId: bytes.Clone(tid[:]), Partition: p, Leader: leader, Replicas: replicas, Isr: isr}
}

// fixture: brokers 1 and 2 active, 3 fenced (registered, never unfenced),
// rack a for broker 1; topic "orders" of 3 partitions: 0 well (leader 1),
// 1 under-replicated (ISR [2]), 2 moving from 3 to 1 (adding 1,
// removing 3; leader 2); topic "audit" of 1 partition, offline.
func fixture(t testing.TB) *fsm.Image {
	t.Helper()
	reg := func(id int32, rack string) *keelpb.Record {
		return rec(&keelpb.BrokerRegistrationRecord{BrokerId: id, IncarnationId: "inc", Address: "127.0.0.1:920" + string('0'+rune(id)),
			Rack: rack, MinMetadataVersion: 1, MaxMetadataVersion: 1})
	}
	reassigning := part(tidOrders, 2, 2, []int32{2, 3, 1}, []int32{2, 3})
	reassigning.AddingReplicas, reassigning.RemovingReplicas = []int32{1}, []int32{3}
	batches := [][]*keelpb.Record{
		{
			{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: "c1"}}},
			{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: 1}}},
			{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: 1, LeaderId: 2}}},
		},
		{reg(1, "a")}, {reg(2, "")}, {reg(3, "")}, // epochs 2, 3, 4: their indexes
		{rec(&keelpb.UnfenceBrokerRecord{BrokerId: 1, BrokerEpoch: 2}), rec(&keelpb.UnfenceBrokerRecord{BrokerId: 2, BrokerEpoch: 3})},
		{
			rec(&keelpb.TopicRecord{Name: "orders", TopicId: bytes.Clone(tidOrders[:])}),
			rec(part(tidOrders, 0, 1, []int32{1, 2}, []int32{1, 2})),
			rec(part(tidOrders, 1, 2, []int32{2, 1}, []int32{2})),
			rec(reassigning),
			rec(&keelpb.TopicRecord{Name: "audit", TopicId: bytes.Clone(tidAudit[:])}),
			rec(part(tidAudit, 0, fsm.NoLeader, []int32{3}, []int32{3})),
		},
	}
	img := fsm.Empty()
	for i, recs := range batches {
		var err error
		if img, err = fsm.Apply(img, uint64(i+1), 1, &keelpb.RecordBatch{Records: recs}); err != nil {
			t.Fatalf("batch %d: %v", i+1, err)
		}
	}
	return img
}

// fakeSource is a controller: node 2, the active one, unless told.
type fakeSource struct {
	img      *fsm.Image
	active   bool
	imgErr   error
	features *keelpb.DescribeFeaturesResponse
}

func (f *fakeSource) DescribeQuorum(context.Context) (*keelpb.DescribeQuorumResponse, error) {
	q := &keelpb.DescribeQuorumResponse{ClusterId: "c1", NodeId: 2, State: "leader", Active: f.active, LeaderId: 2, LastIndex: 40, AppliedIndex: 40,
		Voters: []*keelpb.QuorumMember{{Id: 1, Address: "a1", Suffrage: "voter"}, {Id: 2, Address: "a2", Suffrage: "voter"}, {Id: 3, Address: "a3", Suffrage: "voter"}}}
	if f.active {
		q.Replication = []*keelpb.VoterReplication{{Id: 1, MatchIndex: 37, LastContactMs: 12}, {Id: 2, MatchIndex: 40}, {Id: 3, MatchIndex: 40, LastContactMs: 3}}
	} else {
		q.State = "follower"
	}
	return q, nil
}

func (f *fakeSource) StaleImage(context.Context) (*fsm.Image, *keelpb.ReadSource, error) {
	if f.imgErr != nil {
		return nil, nil, f.imgErr
	}
	return f.img, &keelpb.ReadSource{NodeId: 2, Active: f.active, AppliedIndex: f.img.Offset, LeaderId: 2}, nil
}

func (f *fakeSource) DescribeFeatures(context.Context) (*keelpb.DescribeFeaturesResponse, error) {
	if !f.active {
		return nil, status.Error(codes.FailedPrecondition, "not the active controller; the leader is node 1 at a1")
	}
	return f.features, nil
}

func newConsole(src Source) *Console {
	c := New(Starting, slog.New(slog.DiscardHandler))
	c.now = func() time.Time { return time.Unix(1000, 0) }
	if src != nil {
		c.Attach(src)
	}
	return c
}

// get serves one GET of path from c, as the metrics listener mounts it,
// from a client with the certificate cn ("" plaintext).
func get(t *testing.T, c *Console, path, cn string) *httptest.ResponseRecorder {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(Path, c)
	mux.Handle(RootPattern, c.Redirect())
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.TLS = nil
	if cn != "" {
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: cn}}}}
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
	return v
}

func TestConsole_Overview(t *testing.T) {
	for _, tt := range []struct {
		name   string
		active bool
		check  func(t *testing.T, o overview)
	}{
		{name: "counts", active: true, check: func(t *testing.T, o overview) {
			want := counts{Topics: 2, Partitions: 4, UnderReplicated: 2, Offline: 1, Reassigning: 1, Brokers: 3, FencedBrokers: 1}
			if o.Counts != want {
				t.Errorf("counts %+v, want %+v", o.Counts, want)
			}
			if o.ClusterID != "c1" || o.ControllerEpoch != 1 || o.MetadataVersion != 1 || !o.AsOf.Equal(time.Unix(1000, 0)) {
				t.Errorf("header: %q epoch %d mv %d as of %v", o.ClusterID, o.ControllerEpoch, o.MetadataVersion, o.AsOf)
			}
		}},
		{name: "brokers: state, what each leads and holds, and what moves off", active: true, check: func(t *testing.T, o overview) {
			want := []brokerView{
				{ID: 1, Address: "127.0.0.1:9201", State: fsm.BrokerActive, Epoch: 2, Rack: "a", Leaders: 1, Replicas: 3},
				{ID: 2, Address: "127.0.0.1:9202", State: fsm.BrokerActive, Epoch: 3, Leaders: 2, Replicas: 3},
				{ID: 3, Address: "127.0.0.1:9203", State: fsm.BrokerFenced, Epoch: 4, Replicas: 2, MovingOff: 1},
			}
			if !slices.Equal(o.Brokers, want) {
				t.Errorf("brokers\n%+v, want\n%+v", o.Brokers, want)
			}
		}},
		{name: "reassignments", active: true, check: func(t *testing.T, o overview) {
			if len(o.Reassignments) != 1 || o.ReassignmentsOmitted != 0 {
				t.Fatalf("reassignments %+v, %d omitted", o.Reassignments, o.ReassignmentsOmitted)
			}
			r := o.Reassignments[0]
			if r.Topic != "orders" || r.Partition != 2 || !slices.Equal(r.Adding, []int32{1}) || !slices.Equal(r.Removing, []int32{3}) {
				t.Errorf("reassignment %+v", r)
			}
		}},
		{name: "the active controller knows each voter's lag", active: true, check: func(t *testing.T, o overview) {
			lags := map[int32]uint64{}
			for _, v := range o.Voters {
				if !v.Known {
					t.Errorf("voter %d: replication unknown on the active controller", v.ID)
				}
				lags[v.ID] = v.Lag
			}
			if lags[1] != 3 || lags[2] != 0 || lags[3] != 0 {
				t.Errorf("lags %v, want 1:3 2:0 3:0", lags)
			}
			if !o.Source.Active || o.Source.AppliedIndex != 6 || !o.Node.Active {
				t.Errorf("source %+v node %+v", o.Source, o.Node)
			}
		}},
		{name: "a follower says whose view it is and knows no lag", check: func(t *testing.T, o overview) {
			for _, v := range o.Voters {
				if v.Known || v.LastContactMs != -1 {
					t.Errorf("voter %+v: a follower's page claims replication", v)
				}
			}
			if o.Source.Active || o.Source.NodeID != 2 || o.Source.AppliedIndex != 6 || o.Node.State != "follower" {
				t.Errorf("source %+v node %+v", o.Source, o.Node)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newConsole(&fakeSource{img: fixture(t), active: tt.active})
			tt.check(t, decode[overview](t, get(t, c, "/console/api/overview", "")))
		})
	}
}

func TestConsole_Topics(t *testing.T) {
	for _, tt := range []struct {
		query     string
		wantNames []string
		wantTotal int
	}{
		{query: "", wantNames: []string{"audit", "orders"}, wantTotal: 2},
		{query: "?q=ord", wantNames: []string{"orders"}, wantTotal: 1},
		{query: "?q=nothing", wantNames: []string{}, wantTotal: 0},
		{query: "?limit=1", wantNames: []string{"audit"}, wantTotal: 2},
		{query: "?offset=1&limit=1", wantNames: []string{"orders"}, wantTotal: 2},
		{query: "?offset=5", wantNames: []string{}, wantTotal: 2},
		{query: "?unhealthy=1&q=aud", wantNames: []string{"audit"}, wantTotal: 1},
	} {
		t.Run(tt.query, func(t *testing.T) {
			p := decode[topicPage](t, get(t, newConsole(&fakeSource{img: fixture(t), active: true}), "/console/api/topics"+tt.query, ""))
			var names []string
			for _, r := range p.Topics {
				names = append(names, r.Name)
			}
			if !slices.Equal(names, tt.wantNames) || p.Total != tt.wantTotal {
				t.Fatalf("topics %v of %d, want %v of %d", names, p.Total, tt.wantNames, tt.wantTotal)
			}
		})
	}
	p := decode[topicPage](t, get(t, newConsole(&fakeSource{img: fixture(t), active: true}), "/console/api/topics", ""))
	want := []topicRow{
		{Name: "audit", ID: tidAudit.String(), Partitions: 1, ReplicationFactor: 1, UnderReplicated: 0, Offline: 1},
		{Name: "orders", ID: tidOrders.String(), Partitions: 3, ReplicationFactor: 2, UnderReplicated: 2, Reassigning: 1},
	}
	if !slices.Equal(p.Topics, want) {
		t.Errorf("rows\n%+v, want\n%+v", p.Topics, want)
	}
}

func TestConsole_Partitions(t *testing.T) {
	for _, tt := range []struct {
		query     string
		want      []int32
		wantTotal int
	}{
		{query: "?topic=orders", want: []int32{0, 1, 2}, wantTotal: 3},
		{query: "?topic=orders&offset=1&limit=1", want: []int32{1}, wantTotal: 3},
		{query: "?topic=orders&unhealthy=1", want: []int32{1, 2}, wantTotal: 2},
		{query: "?topic=orders&unhealthy=1&offset=1", want: []int32{2}, wantTotal: 2},
	} {
		t.Run(tt.query, func(t *testing.T) {
			p := decode[partitionPage](t, get(t, newConsole(&fakeSource{img: fixture(t), active: true}), "/console/api/partitions"+tt.query, ""))
			var got []int32
			for _, r := range p.Partitions {
				got = append(got, r.Partition)
			}
			if !slices.Equal(got, tt.want) || p.Total != tt.wantTotal {
				t.Fatalf("partitions %v of %d, want %v of %d", got, p.Total, tt.want, tt.wantTotal)
			}
		})
	}
	p := decode[partitionPage](t, get(t, newConsole(&fakeSource{img: fixture(t), active: true}), "/console/api/partitions?topic=audit", ""))
	r := p.Partitions[0]
	if !r.Offline || r.Leader != fsm.NoLeader || r.NoLeaderReason == "" || !slices.Equal(r.ISR, []int32{3}) {
		t.Errorf("the offline partition: %+v", r)
	}
}

// TestConsole_Requests: who gets what, how refusals read, and the headers
// that keep the page its own.
func TestConsole_Requests(t *testing.T) {
	diverged := status.Error(codes.Unavailable, "controller 2 does not answer stale reads: its metadata image diverged at index 9 (digest); ask another controller")
	for _, tt := range []struct {
		name     string
		src      *fakeSource // nil: the active controller's
		detached bool        // no controller attached (yet)
		mode     Mode
		path, cn string
		want     int
		wantBody string
	}{
		{name: "the page, plaintext", path: "/console/", want: 200, wantBody: `<script src="console.js" defer></script>`},
		{name: "the script", path: "/console/console.js", want: 200, wantBody: "textContent"},
		{name: "/ goes to the console", path: "/", want: http.StatusFound},
		{name: "another path is no console's", path: "/nothing", want: http.StatusNotFound},
		{name: "an admin certificate", path: "/console/api/overview", cn: "admin", want: 200, wantBody: `"cluster_id":"c1"`},
		{name: "a broker certificate", path: "/console/api/overview", cn: "broker-2", want: 200},
		{name: "a controller certificate", path: "/console/", cn: "controller-1", want: 200},
		{name: "a probe certificate may not see the page", path: "/console/", cn: "probe-prometheus", want: http.StatusForbidden,
			wantBody: "a probe certificate (probe-prometheus) may only check health"},
		{name: "nor its data", path: "/console/api/topics", cn: "probe", want: http.StatusForbidden},
		{name: "an unknown API", path: "/console/api/nothing", want: http.StatusNotFound, wantBody: "overview, topics, partitions, features"},
		{name: "a bad limit", path: "/console/api/topics?limit=5000", want: http.StatusBadRequest, wantBody: `limit "5000": want a whole number from 1 to 1000`},
		{name: "a bad offset", path: "/console/api/partitions?topic=orders&offset=-1", want: http.StatusBadRequest},
		{name: "partitions of no topic", path: "/console/api/partitions", want: http.StatusBadRequest, wantBody: "?topic=NAME"},
		{name: "an unknown topic", path: "/console/api/partitions?topic=gone", want: http.StatusNotFound, wantBody: `no topic "gone" in controller 2's image at index 6`},
		{name: "a diverged image", src: &fakeSource{imgErr: diverged}, path: "/console/api/overview", want: http.StatusServiceUnavailable, wantBody: "diverged at index 9"},
		{name: "features from the active controller", path: "/console/api/features", want: 200, wantBody: `"min_metadata_version":1`},
		{name: "features from a follower", src: &fakeSource{}, path: "/console/api/features", want: http.StatusServiceUnavailable, wantBody: "not the active controller"},
		{name: "a controller starting", detached: true, mode: Starting, path: "/console/api/overview", want: http.StatusServiceUnavailable, wantBody: "starting"},
		{name: "a listener no controller attached to", detached: true, mode: IfAttached, path: "/console/", want: http.StatusNotFound},
		{name: "and its /", detached: true, mode: IfAttached, path: "/", want: http.StatusNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tt.mode, slog.New(slog.DiscardHandler))
			src := tt.src
			if src == nil {
				src = &fakeSource{active: true, features: &keelpb.DescribeFeaturesResponse{MetadataVersion: 1,
					Nodes: []*keelpb.FeatureNode{{Kind: "controller", Id: 1, MinMetadataVersion: 1, MaxMetadataVersion: 6}}}}
			}
			if src.img == nil && src.imgErr == nil {
				src.img = fixture(t)
			}
			if !tt.detached {
				c.Attach(src)
			}
			w := get(t, c, tt.path, tt.cn)
			body, _ := io.ReadAll(w.Body)
			if w.Code != tt.want || !strings.Contains(string(body), tt.wantBody) {
				t.Fatalf("GET %s: %d %q, want %d with %q", tt.path, w.Code, body, tt.want, tt.wantBody)
			}
			if w.Code >= 400 && strings.Count(strings.TrimSpace(string(body)), "\n") > 0 {
				t.Errorf("refusal is not one line: %q", body)
			}
			if w.Code != http.StatusFound && tt.path != "/nothing" && tt.path != "/" {
				h := w.Header()
				if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
					t.Errorf("Content-Security-Policy %q", csp)
				}
				if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") == "" {
					t.Errorf("headers %v", h)
				}
			}
		})
	}
}

// TestConsole_LoopbackHost: on a plaintext loopback listener the console
// answers only a Host that names loopback, so that a page from elsewhere
// cannot rebind a name of its own to 127.0.0.1 and read it.
func TestConsole_LoopbackHost(t *testing.T) {
	loopback := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9100}
	for _, tt := range []struct {
		name, host string
		local      net.Addr
		tls        bool
		want       int
	}{
		{name: "127.0.0.1", host: "127.0.0.1:9100", local: loopback, want: 200},
		{name: "localhost", host: "localhost:9100", local: loopback, want: 200},
		{name: "::1", host: "[::1]:9100", local: &net.TCPAddr{IP: net.IPv6loopback, Port: 9100}, want: 200},
		{name: "another name", host: "attacker.example:9100", local: loopback, want: http.StatusForbidden},
		{name: "another name, over TLS", host: "ctl-1.example:9100", local: loopback, tls: true, want: 200},
		{name: "another name, on another interface", host: "ctl-1.example:9100", local: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 9100}, want: 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/console/api/overview", nil)
			r.Host = tt.host
			r.TLS = nil
			if tt.tls {
				r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{Subject: pkix.Name{CommonName: "admin"}}}}
			}
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, tt.local))
			w := httptest.NewRecorder()
			newConsole(&fakeSource{img: fixture(t), active: true}).ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Fatalf("Host %s on %s: %d %s, want %d", tt.host, tt.local, w.Code, w.Body, tt.want)
			}
		})
	}
}

// TestConsole_ReadOnly: the console answers GET and HEAD only.
func TestConsole_ReadOnly(t *testing.T) {
	c := newConsole(&fakeSource{img: fixture(t), active: true})
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		w := httptest.NewRecorder()
		c.ServeHTTP(w, httptest.NewRequest(m, "/console/api/overview", nil))
		if w.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s: %d, want 405", m, w.Code)
		}
	}
}

// TestConsole_ScanKeptPerImage: an unchanged image is not walked again;
// a new one is.
func TestConsole_ScanKeptPerImage(t *testing.T) {
	var c scanCache
	img := fixture(t)
	first := c.of(img)
	if c.of(img) != first {
		t.Error("the same image was scanned again")
	}
	tid := fsm.TopicID{0x3}
	next, err := fsm.Apply(img, img.Offset+1, 1, &keelpb.RecordBatch{Records: []*keelpb.Record{
		rec(&keelpb.TopicRecord{Name: "new", TopicId: bytes.Clone(tid[:])}),
		rec(part(tid, 0, 1, []int32{1, 2}, []int32{1})),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if s := c.of(next); s == first || s.counts.UnderReplicated != 3 {
		t.Errorf("a new image: the old scan, or %d under-replicated, want 3", s.counts.UnderReplicated)
	}
}

// TestStatic_NoInlineScriptNorHTMLFromData: the page loads its one script
// from a file (the CSP allows no inline script), and the script never
// parses data as HTML.
func TestStatic_NoInlineScriptNorHTMLFromData(t *testing.T) {
	page, err := static.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`<script[^>]*>`).FindAll(page, -1) {
		if !bytes.Contains(m, []byte(`src="`)) {
			t.Errorf("inline script: %s", m)
		}
	}
	if bytes.Contains(page, []byte(" on")) && regexp.MustCompile(`\son[a-z]+=`).Match(page) {
		t.Error("an inline event handler in index.html")
	}
	if bytes.Contains(page, []byte("//")) && regexp.MustCompile(`(src|href)="(https?:)?//`).Match(page) {
		t.Error("index.html loads from another origin")
	}
	js, err := static.ReadFile("static/console.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if bytes.Contains(js, []byte(sink)) {
			t.Errorf("console.js uses %s", sink)
		}
	}
}
