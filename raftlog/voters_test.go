package raftlog

import (
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestParseVoters(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Voter
		wantErr string
	}{
		{
			name: "three voters",
			in:   "1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093",
			want: []Voter{{1, "127.0.0.1:9091"}, {2, "127.0.0.1:9092"}, {3, "127.0.0.1:9093"}},
		},
		{
			name: "whitespace trimmed",
			in:   "  1@a.example:9091 ,\t2@[::1]:9092\n",
			want: []Voter{{1, "a.example:9091"}, {2, "[::1]:9092"}},
		},
		{name: "single voter", in: "7@localhost:1", want: []Voter{{7, "localhost:1"}}},
		{name: "empty", in: "", wantErr: "--voters is empty"},
		{name: "blank", in: "  ", wantErr: "--voters is empty"},
		{name: "empty entry", in: "1@h:1,,2@h:2", wantErr: "--voters entry 2 is empty"},
		{name: "trailing comma", in: "1@h:1,", wantErr: "--voters entry 2 is empty"},
		{name: "missing at", in: "127.0.0.1:9091", wantErr: `entry "127.0.0.1:9091": missing '@'`},
		{name: "non-numeric id", in: "x@h:1", wantErr: `node id "x" is not a positive integer`},
		{name: "zero id", in: "0@h:1", wantErr: `node id "0" is not a positive integer`},
		{name: "negative id", in: "-1@h:1", wantErr: `node id "-1" is not a positive integer`},
		{name: "id overflows int32", in: "2147483648@h:1", wantErr: `node id "2147483648" is not a positive integer`},
		{name: "no port", in: "1@host", wantErr: `bad address "host": missing port in address`},
		{name: "no host", in: "1@:9091", wantErr: `bad address ":9091": missing host`},
		{name: "port zero", in: "1@h:0", wantErr: `port "0" is not in 1..65535`},
		{name: "port too big", in: "1@h:65536", wantErr: `port "65536" is not in 1..65535`},
		{name: "port not a number", in: "1@h:http", wantErr: `port "http" is not in 1..65535`},
		{name: "duplicate id", in: "1@h:1,1@h:2", wantErr: "node id 1 appears more than once"},
		{name: "duplicate address", in: "1@h:1,2@h:1", wantErr: "address h:1 appears more than once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseVoters(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseVoters(%q) error = %v, want it to contain %q", tt.in, err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error spans lines: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseVoters(%q): %v", tt.in, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("ParseVoters(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestFindVoter(t *testing.T) {
	voters := []Voter{{1, "h:1"}, {2, "h:2"}}
	tests := []struct {
		name    string
		id      int32
		want    Voter
		wantErr string
	}{
		{name: "first", id: 1, want: Voter{1, "h:1"}},
		{name: "last", id: 2, want: Voter{2, "h:2"}},
		{name: "absent", id: 3, wantErr: "--voters does not contain node id 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FindVoter(voters, tt.id)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("FindVoter(%d) error = %v, want %q", tt.id, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("FindVoter(%d) = %v, %v; want %v", tt.id, got, err, tt.want)
			}
		})
	}
}

func TestServerID(t *testing.T) {
	tests := []struct {
		name    string
		id      raft.ServerID
		want    int32
		wantErr bool
	}{
		{name: "one", id: "1", want: 1},
		{name: "max int32", id: "2147483647", want: 2147483647},
		{name: "empty", id: "", wantErr: true},
		{name: "zero", id: "0", wantErr: true},
		{name: "negative", id: "-3", wantErr: true},
		{name: "leading zero", id: "01", wantErr: true},
		{name: "plus sign", id: "+1", wantErr: true},
		{name: "uuid", id: "5b1e7d2c-0000-4000-8000-000000000000", wantErr: true},
		{name: "overflow", id: "2147483648", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseServerID(tt.id)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseServerID(%q) = %d, want an error", tt.id, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseServerID(%q) = %d, %v; want %d", tt.id, got, err, tt.want)
			}
			if back := ServerID(got); back != tt.id {
				t.Errorf("ServerID(%d) = %q, want %q", got, back, tt.id)
			}
		})
	}
}

func TestTiming_Validate(t *testing.T) {
	ms := time.Millisecond
	with := func(f func(*Timing)) Timing {
		tm := DefaultTiming()
		f(&tm)
		return tm
	}
	tests := []struct {
		name    string
		timing  Timing
		wantErr string
	}{
		{name: "defaults", timing: DefaultTiming()},
		{name: "test timings", timing: Timing{50 * ms, 50 * ms, 50 * ms, 5 * ms, true, 0}},
		{name: "lease equals heartbeat", timing: with(func(t *Timing) { t.LeaderLeaseTimeout = t.HeartbeatTimeout })},
		{
			name:    "lease exceeds heartbeat",
			timing:  with(func(t *Timing) { t.LeaderLeaseTimeout = 400 * ms }),
			wantErr: "--raft-leader-lease-timeout (400ms) must not exceed --raft-heartbeat-timeout (300ms)",
		},
		{
			name:    "election below heartbeat",
			timing:  with(func(t *Timing) { t.ElectionTimeout = 200 * ms }),
			wantErr: "--raft-election-timeout (200ms) must not be less than --raft-heartbeat-timeout (300ms)",
		},
		{name: "zero heartbeat", timing: with(func(t *Timing) { t.HeartbeatTimeout = 0 }), wantErr: "--raft-heartbeat-timeout (0s) must be positive"},
		{name: "zero election", timing: with(func(t *Timing) { t.ElectionTimeout = 0 }), wantErr: "--raft-election-timeout (0s) must be positive"},
		{name: "negative lease", timing: with(func(t *Timing) { t.LeaderLeaseTimeout = -ms }), wantErr: "--raft-leader-lease-timeout (-1ms) must be positive"},
		{name: "zero commit", timing: with(func(t *Timing) { t.CommitTimeout = 0 }), wantErr: "--raft-commit-timeout (0s) must be positive"},
		{name: "heartbeat below raft minimum", timing: Timing{2 * ms, 2 * ms, 2 * ms, ms, false, 0}, wantErr: "--raft-heartbeat-timeout (2ms) must be at least 5ms"},
		{name: "crash confirm at its minimum", timing: with(func(t *Timing) { t.CrashConfirm = minCrashConfirm })},
		{name: "crash confirm below its minimum", timing: with(func(t *Timing) { t.CrashConfirm = 20 * ms }),
			wantErr: "--raft-crash-confirm (20ms) must be at least 50ms (a few probes of the leader's port), or 0 for the default"},
		{name: "negative crash confirm", timing: with(func(t *Timing) { t.CrashConfirm = -ms }),
			wantErr: "--raft-crash-confirm (-1ms) must be at least 50ms (a few probes of the leader's port), or 0 for the default"},
		{name: "commit below raft minimum", timing: with(func(t *Timing) { t.CommitTimeout = 500 * time.Microsecond }), wantErr: "--raft-commit-timeout (500µs) must be at least 1ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.timing.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestTiming_CrashWindow: the crash election's window is CrashConfirm, its
// default when 0, and never less than two of the leader's longest
// heartbeat intervals.
func TestTiming_CrashWindow(t *testing.T) {
	ms := time.Millisecond
	for _, tt := range []struct {
		heartbeat, confirm, want time.Duration
	}{
		{300 * ms, 0, DefaultCrashConfirm},
		{300 * ms, 150 * ms, 150 * ms},
		{300 * ms, 100 * ms, 120 * ms},
		{2 * time.Second, 0, 800 * ms},
		{50 * ms, 0, DefaultCrashConfirm},
	} {
		tm := Timing{HeartbeatTimeout: tt.heartbeat, CrashConfirm: tt.confirm}
		if got := tm.crashWindow(); got != tt.want {
			t.Errorf("heartbeat %v, crash confirm %v: window %v, want %v", tt.heartbeat, tt.confirm, got, tt.want)
		}
	}
}

// TestTiming_AcceptedByRaft checks that Validate is not looser than raft:
// anything it accepts must pass raft.ValidateConfig too.
func TestTiming_AcceptedByRaft(t *testing.T) {
	for _, tm := range []Timing{DefaultTiming(), {5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond, time.Millisecond, true, 0}} {
		if err := tm.Validate(); err != nil {
			t.Fatalf("Validate(%+v): %v", tm, err)
		}
		rc := raft.DefaultConfig()
		rc.LocalID = "1"
		rc.HeartbeatTimeout, rc.ElectionTimeout = tm.HeartbeatTimeout, tm.ElectionTimeout
		rc.LeaderLeaseTimeout, rc.CommitTimeout = tm.LeaderLeaseTimeout, tm.CommitTimeout
		if err := raft.ValidateConfig(rc); err != nil {
			t.Errorf("raft rejects %+v: %v", tm, err)
		}
	}
}

// FuzzParseVoters checks what a parsed --voters promises, on any input: no
// panic, errors of one line, and on success at least one voter, positive
// distinct ids and distinct host:port addresses with a port in 1..65535.
func FuzzParseVoters(f *testing.F) {
	for _, s := range []string{"1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093", " 1@h:1 ", "1@h:1,1@h:2", "1@h:1,2@h:1",
		"0@h:1", "-1@h:1", "1@h", "1@h:0", "1@h:65536", "1@[::1]:9091", "@", ",", "2147483648@h:1", "1@@h:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		voters, err := ParseVoters(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			return
		}
		if len(voters) == 0 {
			t.Fatalf("ParseVoters(%q): no voters, no error", s)
		}
		ids, addrs := map[int32]bool{}, map[string]bool{}
		for _, v := range voters {
			host, port, err := net.SplitHostPort(v.Address)
			p, perr := strconv.Atoi(port)
			if v.ID <= 0 || ids[v.ID] || addrs[v.Address] || err != nil || host == "" && port == "" || perr != nil || p < 1 || p > 65535 {
				t.Fatalf("ParseVoters(%q) = %+v", s, voters)
			}
			ids[v.ID], addrs[v.Address] = true, true
		}
	})
}

func TestParseRaftDial(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[int32]string
		wantErr string
	}{
		{name: "empty means none", in: "", want: nil},
		{name: "blank means none", in: " \t", want: nil},
		{name: "two peers", in: "2@127.0.0.1:7002, 3@proxy:7003", want: map[int32]string{2: "127.0.0.1:7002", 3: "proxy:7003"}},
		{name: "errors name the flag", in: "2@h", wantErr: `--raft-dial entry "2@h": bad address "h": missing port in address`},
		{name: "duplicate id", in: "2@h:1,2@h:2", wantErr: "--raft-dial: node id 2 appears more than once"},
		{name: "empty entry", in: "2@h:1,", wantErr: "--raft-dial entry 2 is empty (want ID@HOST:PORT)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRaftDial(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseRaftDial(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRaftDial(%q): %v", tt.in, err)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("ParseRaftDial(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestDialAddrs(t *testing.T) {
	if p := dialAddrs(nil, 1, "127.0.0.1:7001"); p != nil {
		t.Fatalf("dialAddrs(nil) = %v, want no provider (raft dials configured addresses)", p)
	}
	p := dialAddrs(map[int32]string{2: "127.0.0.1:7002"}, 1, "127.0.0.1:7001")
	tests := []struct {
		id      raft.ServerID
		want    raft.ServerAddress
		wantErr bool
	}{
		{id: "2", want: "127.0.0.1:7002"},
		// Itself, for the header of its own RPCs: the address the peers
		// know, not an error raft would warn about on every RPC.
		{id: "1", want: "127.0.0.1:7001"},
		{id: "3", wantErr: true}, // raft falls back to the configured address
		{id: "x", wantErr: true},
	}
	for _, tt := range tests {
		got, err := p.ServerAddr(tt.id)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ServerAddr(%q) = %q, %v; want %q, error %v", tt.id, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseNodeID(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int32
		ok   bool
	}{
		{"1", 1, true}, {"2147483647", 2147483647, true},
		{"0", 0, false}, {"-1", 0, false}, {"2147483648", 0, false}, {"x", 0, false}, {"", 0, false}, {" 1", 0, false},
	} {
		if got, ok := ParseNodeID(tt.in); got != tt.want || ok != tt.ok {
			t.Errorf("ParseNodeID(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
