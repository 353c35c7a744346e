package keelproc

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestControllerArgs_Build(t *testing.T) {
	tests := []struct {
		name string
		args ControllerArgs
		want string
	}{
		{
			name: "voters only",
			args: ControllerArgs{ID: 2, Listen: "127.0.0.1:9092", DataDir: "/d/2", Voters: "1@a:1,2@b:2"},
			want: "controller --node-id 2 --listen 127.0.0.1:9092 --data-dir /d/2 --voters 1@a:1,2@b:2",
		},
		{
			name: "join, with every optional flag, the caller's flags last",
			args: ControllerArgs{ID: 4, Listen: "127.0.0.1:1", DataDir: "/d/4", Voters: "ignored", Join: true,
				ClusterID: "C", RaftDial: "1@p:1", MetricsAddr: "127.0.0.1:2", Flags: []string{"--log-store", "wal"}},
			want: "controller --node-id 4 --listen 127.0.0.1:1 --data-dir /d/4 --join --cluster-id C --raft-dial 1@p:1 --metrics-addr 127.0.0.1:2 --log-store wal",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(tt.args.Build(), " "); got != tt.want {
				t.Fatalf("Build() =\n  %s\nwant\n  %s", got, tt.want)
			}
		})
	}
}

func TestBrokerArgs_Build(t *testing.T) {
	tests := []struct {
		name string
		args BrokerArgs
		want string
	}{
		{
			name: "identity only",
			args: BrokerArgs{ID: 1, Listen: "127.0.0.1:1", DataDir: "/b/1", Controllers: []string{"a:1", "b:2"}},
			want: "broker --broker-id 1 --listen 127.0.0.1:1 --data-dir /b/1 --controllers a:1,b:2",
		},
		{
			name: "every optional flag, the caller's flags last",
			args: BrokerArgs{ID: 3, Listen: "127.0.0.1:1", DataDir: "/b/3", Controllers: []string{"a:1"},
				Heartbeat: 200 * time.Millisecond, Rack: "r3", MetricsAddr: "127.0.0.1:2", Flags: []string{"--rack", "override"}},
			want: "broker --broker-id 3 --listen 127.0.0.1:1 --data-dir /b/3 --controllers a:1 --heartbeat-interval 200ms --rack r3 --metrics-addr 127.0.0.1:2 --rack override",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(tt.args.Build(), " "); got != tt.want {
				t.Fatalf("Build() =\n  %s\nwant\n  %s", got, tt.want)
			}
		})
	}
}

func TestSetFlag(t *testing.T) {
	args := []string{"broker", "--listen", "a:1", "--rack", "r1"}
	tests := []struct {
		name, flag, value string
		want              []string
	}{
		{"present", "--listen", "b:2", []string{"broker", "--listen", "b:2", "--rack", "r1"}},
		{"absent", "--metrics-addr", "c:3", args},
		{"last, with no value", "r1", "x", args},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(args)
			if got := setFlag(args, tt.flag, tt.value); !slices.Equal(got, tt.want) {
				t.Fatalf("setFlag(%q, %q) = %q, want %q", tt.flag, tt.value, got, tt.want)
			}
			if !slices.Equal(args, before) {
				t.Fatalf("setFlag changed its argument: %q", args)
			}
		})
	}
}

func TestFreeAddrs(t *testing.T) {
	addrs, err := FreeAddrs(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host != "127.0.0.1" || port == "0" {
			t.Fatalf("FreeAddrs gave %q (%v); want 127.0.0.1:PORT", a, err)
		}
		if seen[a] {
			t.Fatalf("FreeAddrs gave %s twice: %v", a, addrs)
		}
		seen[a] = true
	}
	// Free again: FreeAddrs holds nothing open once it returns.
	ln, err := net.Listen("tcp", addrs[0])
	if err != nil {
		t.Fatalf("listen on %s after FreeAddrs: %v", addrs[0], err)
	}
	ln.Close()
}

func TestLastLines(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb", 5, "a\nb"},
	}
	for _, tt := range tests {
		if got := LastLines(tt.in, tt.n); got != tt.want {
			t.Errorf("LastLines(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
