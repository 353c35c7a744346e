package connlimit

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// fromConn is a pipe end whose peer is at addr, as an accepted TCP
// connection's is.
type fromConn struct {
	net.Conn
	addr *net.TCPAddr
}

func (c fromConn) RemoteAddr() net.Addr { return c.addr }

func from(t *testing.T, ip string) net.Conn {
	t.Helper()
	return fromConn{Conn: pipeConn(t), addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
}

// TestLimiter_CountsBySourceAndListener: connections count against the
// listener's bound and their source address's from accept to Close,
// authenticated or not; a refusal counts nothing and says which bound;
// an IPv4 peer on a dual-stack socket is the same source as itself.
func TestLimiter_CountsBySourceAndListener(t *testing.T) {
	type step struct {
		src string
		// close, when >= 0, closes the connection admitted at that step
		// instead of admitting one.
		close int
		want  string // the refusal's reason, "" admitted
	}
	admit := func(src, want string) step { return step{src: src, close: -1, want: want} }
	closeStep := func(i int) step { return step{close: i} }
	tests := []struct {
		name  string
		lim   Limits
		steps []step
		// wantOpen is the connections open at the end.
		wantOpen int
	}{
		{name: "per source", lim: Limits{MaxConns: 10, MaxPerSource: 2}, steps: []step{
			admit("10.0.0.1", ""), admit("10.0.0.1", ""), admit("10.0.0.1", ReasonSource),
			admit("10.0.0.2", ""), closeStep(0), admit("10.0.0.1", ""),
		}, wantOpen: 3},
		{name: "per source, mapped IPv4", lim: Limits{MaxPerSource: 1}, steps: []step{
			admit("10.0.0.1", ""), admit("::ffff:10.0.0.1", ReasonSource), admit("10.0.0.3", ""),
		}, wantOpen: 2},
		{name: "listener", lim: Limits{MaxConns: 3, MaxPerSource: 2}, steps: []step{
			admit("10.0.0.1", ""), admit("10.0.0.2", ""), admit("10.0.0.3", ""), admit("10.0.0.4", ReasonListener),
			closeStep(1), admit("10.0.0.4", ""),
		}, wantOpen: 3},
		{name: "listener before source", lim: Limits{MaxConns: 2, MaxPerSource: 2}, steps: []step{
			admit("10.0.0.1", ""), admit("10.0.0.1", ""), admit("10.0.0.1", ReasonListener),
		}, wantOpen: 2},
		{name: "unauthenticated below the listener's", lim: Limits{MaxConns: 4, MaxUnauthenticated: 1}, steps: []step{
			admit("10.0.0.1", ""), admit("10.0.0.2", ReasonUnauthenticated),
		}, wantOpen: 1},
		{name: "no bounds", lim: Limits{}, steps: []step{
			admit("10.0.0.1", ""), admit("10.0.0.1", ""), admit("10.0.0.1", ""),
		}, wantOpen: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLimits(tt.lim, time.Hour, "test")
			l.SetLogger(slog.New(slog.DiscardHandler))
			admitted := make([]net.Conn, len(tt.steps))
			refused := map[string]uint64{}
			for i, s := range tt.steps {
				if s.close >= 0 {
					admitted[s.close].Close()
					continue
				}
				c, ok := l.Admit(from(t, s.src))
				// Strangers authenticate: only the bounds on all
				// connections and per source matter to them then.
				if ok && tt.lim.MaxUnauthenticated == 0 {
					Authenticated(c)
				}
				switch {
				case ok && s.want != "":
					t.Fatalf("step %d: a connection from %s was admitted; want it refused (%s)", i, s.src, s.want)
				case !ok && s.want == "":
					t.Fatalf("step %d: a connection from %s was refused; want it admitted", i, s.src)
				case ok:
					admitted[i] = c
					t.Cleanup(func() { c.Close() })
				default:
					refused[s.want]++
				}
			}
			if got := l.Open(); got != tt.wantOpen {
				t.Errorf("open %d; want %d", got, tt.wantOpen)
			}
			for _, reason := range []string{ReasonListener, ReasonSource, ReasonUnauthenticated} {
				if got := l.RefusedBy(reason); got != refused[reason] {
					t.Errorf("refused for %s: %d; want %d", reason, got, refused[reason])
				}
			}
			for _, c := range admitted {
				if c != nil {
					c.Close()
					c.Close() // a second Close uncounts nothing more
				}
			}
			if l.Open() != 0 || len(l.bySource) != 0 || l.Pending() != 0 {
				t.Errorf("after closing every connection: open %d, sources %v, pending %d; want none", l.Open(), l.bySource, l.Pending())
			}
		})
	}
}

// TestPlan derives each listener's bounds from the open-files limit, and
// refuses bounds that cannot fit beside the reserve in one line.
func TestPlan(t *testing.T) {
	tests := []struct {
		name     string
		files    int
		reserved int
		shares   []Share
		want     []Limits
		wantErr  string
	}{
		{name: "a broker at 20,000 files", files: 20000, shares: []Share{
			{Flag: "--max-connections", Weight: 1}, {Flag: "metrics", Weight: 1}, {Flag: "--kafka-max-connections", Weight: 6},
		}, want: []Limits{
			{MaxConns: 1250, MaxPerSource: 312, MaxUnauthenticated: 312},
			{MaxConns: 1250, MaxPerSource: 312, MaxUnauthenticated: 312},
			{MaxConns: 7500, MaxPerSource: 1875, MaxUnauthenticated: 1024},
		}},
		{name: "the reserve is at least 256", files: 300, shares: []Share{{Flag: "a", Weight: 1}},
			want: []Limits{{MaxConns: 44, MaxPerSource: 11, MaxUnauthenticated: 11}}},
		{name: "given bounds first, the rest shared", files: 10000, reserved: 2000, shares: []Share{
			{Flag: "--max-connections", Weight: 1, MaxConns: 1000, MaxPerSource: 900}, {Flag: "--kafka-max-connections", Weight: 6},
		}, want: []Limits{
			{MaxConns: 1000, MaxPerSource: 900, MaxUnauthenticated: 250},
			{MaxConns: 7000, MaxPerSource: 1750, MaxUnauthenticated: 1024},
		}},
		{name: "given bounds over the limit", files: 10000, shares: []Share{
			{Flag: "--kafka-max-connections", Weight: 6, MaxConns: 6000},
		}, wantErr: "the open-files limit (RLIMIT_NOFILE) is 10000: with 5000 kept for the logs (--reserved-files), --kafka-max-connections 6000 leave no room"},
		{name: "a reserve over the limit", files: 1024, reserved: 1024, shares: []Share{{Flag: "a", Weight: 1}},
			wantErr: "with 1024 kept for the logs (--reserved-files), the listeners leave no room"},
		{name: "a negative reserve", files: 1024, reserved: -1, wantErr: "-1 descriptors reserved"},
		{name: "a negative bound", files: 1024, shares: []Share{{Flag: "--max-connections-per-ip", MaxPerSource: -1}},
			wantErr: "--max-connections-per-ip: a negative bound"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Plan(tt.files, tt.reserved, tt.shares)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Plan: %v; want an error containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("the error is not one line: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Plan: %+v; want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("share %d (%s): %+v; want %+v", i, tt.shares[i].Flag, got[i], tt.want[i])
				}
			}
		})
	}
}
