package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckPlaintext(t *testing.T) {
	loop := []flagAddr{{flag: "--listen", addr: "127.0.0.1:9091"}, {flag: "--voters", id: 1, addr: "127.0.0.1:9091"}, {flag: "--metrics-addr"}}
	wide := []flagAddr{{flag: "--listen", addr: "127.0.0.1:9091"}, {flag: "--voters", id: 2, addr: "10.0.0.2:9091"}, {flag: "--metrics-addr", addr: ":9100"}}
	tests := []struct {
		name        string
		tls         bool
		insecure    bool
		addrs       []flagAddr
		wantExposed string
		wantErr     string
	}{
		{name: "TLS", tls: true, addrs: wide},
		{name: "TLS and --insecure", tls: true, insecure: true, addrs: loop, wantErr: errInsecureWithTLS.Error()},
		{name: "loopback", addrs: loop},
		{name: "loopback and --insecure", insecure: true, addrs: loop},
		{name: "nothing given", addrs: []flagAddr{{flag: "--listen"}}},
		{name: "not loopback", addrs: wide,
			wantErr: "--voters 2@10.0.0.2:9091 is not a loopback address and TLS is off: give --tls-cert, --tls-key and --tls-ca (keel cert makes them), or --insecure to run plaintext anyway, where anyone who can reach the port can forge metadata"},
		{name: "not loopback, --insecure", insecure: true, addrs: wide, wantExposed: "--voters 2@10.0.0.2:9091"},
		{name: "an empty host is every interface", addrs: []flagAddr{{flag: "--listen", addr: ":9091"}}, wantErr: "--listen :9091 is not a loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exposed, err := checkPlaintext(tt.tls, tt.insecure, tt.addrs)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if exposed != nil {
				got = exposed.String()
			}
			if got != tt.wantExposed {
				t.Errorf("exposed = %q, want %q", got, tt.wantExposed)
			}
		})
	}
}

// TestPlaintext_RefusedOffLoopback: a controller or broker without TLS on
// any address that is not loopback refuses to start, in one line naming
// the address, and touches nothing; with the --tls-* flags --insecure is a
// contradiction.
func TestPlaintext_RefusedOffLoopback(t *testing.T) {
	_, files := testCerts(t, "controller-1", "broker-1")
	addr := freeAddr(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	ctrl := func(extra ...string) []string {
		return append([]string{"controller", "--node-id", "1", "--data-dir", dataDir}, extra...)
	}
	brk := func(extra ...string) []string {
		return append([]string{"broker", "--broker-id", "1", "--data-dir", dataDir}, extra...)
	}
	const ways = " is not a loopback address and TLS is off: give --tls-cert, --tls-key and --tls-ca (keel cert makes them), or --insecure"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"controller on another host", ctrl("--listen", "10.0.0.1:9091", "--voters", "1@10.0.0.1:9091"), "--listen 10.0.0.1:9091" + ways},
		{"controller on every interface", ctrl("--listen", ":9091", "--voters", "1@127.0.0.1:9091"), "--listen :9091" + ways},
		{"controller on 0.0.0.0", ctrl("--listen", "0.0.0.0:9091", "--voters", "1@127.0.0.1:9091"), "--listen 0.0.0.0:9091" + ways},
		{"controller's own voter entry", ctrl("--voters", "1@keel-1:9091"), "--voters 1@keel-1:9091" + ways},
		{"another voter", ctrl("--voters", "1@"+addr+",2@10.0.0.2:9091,3@127.0.0.1:9093"), "--voters 2@10.0.0.2:9091" + ways},
		{"a raft-dial address", ctrl("--voters", "1@"+addr+",2@127.0.0.1:9092", "--raft-dial", "2@proxy.example:9092"), "--raft-dial 2@proxy.example:9092" + ways},
		{"controller metrics", ctrl("--voters", "1@"+addr, "--metrics-addr", "0.0.0.0:9100"), "--metrics-addr 0.0.0.0:9100" + ways},
		{"joiner", ctrl("--join", "--listen", "[::]:9094"), "--listen [::]:9094" + ways},
		{"broker on another host", brk("--listen", "10.0.0.11:9201"), "--listen 10.0.0.11:9201" + ways},
		{"broker advertised elsewhere", brk("--listen", addr, "--advertise", "broker-1.example:9201"), "--advertise broker-1.example:9201" + ways},
		{"broker dialing a remote controller", brk("--listen", addr, "--controllers", "127.0.0.1:9091,10.0.0.2:9091"), "--controllers 10.0.0.2:9091" + ways},
		{"broker metrics", brk("--listen", addr, "--metrics-addr", "192.168.0.7:9100"), "--metrics-addr 192.168.0.7:9100" + ways},
		{"controller, --insecure with TLS", ctrl(append([]string{"--voters", "1@" + addr, "--insecure"}, files["controller-1"].Flags()...)...), errInsecureWithTLS.Error()},
		{"broker, --insecure with a TLS flag", brk("--listen", addr, "--insecure", "--tls-ca", files["broker-1"].CA), errInsecureWithTLS.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runKeel(t, tt.args...)
			if err == nil {
				t.Fatalf("keel %s started", strings.Join(tt.args, " "))
			}
			line := errorLine(err)
			if !strings.HasPrefix(line, tt.want) || strings.Contains(line, "\n") {
				t.Fatalf("keel %s: %q, want one line starting %q", strings.Join(tt.args, " "), line, tt.want)
			}
			if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the refused start touched the data dir: %v", err)
			}
		})
	}
}
