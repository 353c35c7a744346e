package hostport

import "testing"

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:9091", true},
		{"127.0.0.1:0", true},
		{"127.1.2.3:9091", true}, // all of 127.0.0.0/8
		{"[::1]:9091", true},
		{"localhost:9091", true},
		{"LocalHost:9091", true}, // host names are case-insensitive
		{"[::ffff:127.0.0.1]:9091", true},

		{":9091", false}, // every interface
		{"0.0.0.0:9091", false},
		{"[::]:9091", false},
		{"10.0.0.1:9091", false},
		{"192.168.1.5:9100", false},
		{"[fe80::1%eth0]:9091", false},
		{"128.0.0.1:9091", false},
		{"keel-1.example:9091", false}, // a name may resolve anywhere
		{"localhost.example:9091", false},
		{"localhost.:9091", false},
		{"127.0.0.1", false}, // no port: not an address
		{"", false},
		{"[::1:9091", false},
	}
	for _, tt := range tests {
		if got := IsLoopback(tt.addr); got != tt.want {
			t.Errorf("IsLoopback(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

func TestCheck(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:9091": true, "keel-1:1": true, "[::1]:65535": true,
		":9091": false, "127.0.0.1:0": false, "127.0.0.1:65536": false, "127.0.0.1": false, "h:p": false,
	} {
		if err := Check(addr); (err == nil) != ok {
			t.Errorf("Check(%q) = %v, want ok %v", addr, err, ok)
		}
	}
}
