package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestDevSlot_Layout: from the default base, broker 1's Kafka listener is
// Kafka's 9092 and the controllers are the admin commands' default
// --controllers; every role has its own block of 100 ports.
func TestDevSlot_Layout(t *testing.T) {
	tests := []struct {
		slot devSlot
		base int
		want int
	}{
		{devSlot{devKafka, 1}, devBasePort, 9092},
		{devSlot{devKafka, 3}, devBasePort, 9094},
		{devSlot{devController, 1}, devBasePort, 9192},
		{devSlot{devController, 5}, devBasePort, 9196},
		{devSlot{devBroker, 2}, devBasePort, 9293},
		{devSlot{devControllerMetrics, 1}, devBasePort, 9392},
		{devSlot{devBrokerMetrics, 100}, devBasePort, 9591},
		{devSlot{devBrokerMetrics, 100}, devMaxBase, 65535},
		{devSlot{devController, 2}, 20000, 20101},
	}
	for _, tt := range tests {
		if got := tt.slot.port(tt.base); got != tt.want {
			t.Errorf("%s from %d: port %d, want %d", tt.slot, tt.base, got, tt.want)
		}
	}
	var ctl []string
	for _, s := range devSlots(3, 0, false) {
		ctl = append(ctl, "127.0.0.1:"+strconv.Itoa(s.port(devBasePort)))
	}
	if got := strings.Join(ctl, ","); got != defaultControllers {
		t.Errorf("the layout's controllers %s, want the default --controllers %s", got, defaultControllers)
	}
}

func TestCheckDevBasePort(t *testing.T) {
	tests := []struct {
		name          string
		base, brokers int
		wantErr       string
	}{
		{name: "default", base: devBasePort, brokers: 3},
		{name: "free ports", base: 0, brokers: 1000},
		{name: "the last that fits", base: devMaxBase, brokers: 100},
		{name: "past the last port", base: devMaxBase + 1, brokers: 1, wantErr: "--base-port 65037: want 0 (free ports) or 1 to 65036 (the layout takes 500 ports from it)"},
		{name: "negative", base: -1, brokers: 1, wantErr: "--base-port -1: want 0"},
		{name: "more brokers than a block", base: devBasePort, brokers: 101, wantErr: "--brokers-count 101: the port layout of --base-port holds 100 brokers; give --base-port 0 for free ports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkDevBasePort(tt.base, tt.brokers)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr)) {
				t.Errorf("checkDevBasePort(%d, %d) = %v, want %q", tt.base, tt.brokers, err, tt.wantErr)
			}
		})
	}
}

// TestPlanDevAddrs: a saved address is kept, or refused in one line naming
// it and the file; a layout port that is taken moves to a free port and is
// named for the banner; base 0 takes free ports throughout.
func TestPlanDevAddrs(t *testing.T) {
	const path = "/d/dev.json"
	slots := devSlots(1, 2, false) // controller 1; brokers 1, 2; Kafka 1, 2
	takenSet := func(addrs ...string) func(string) error {
		return func(a string) error {
			for _, t := range addrs {
				if a == t {
					return syscall.EADDRINUSE
				}
			}
			return nil
		}
	}
	tests := []struct {
		name      string
		saved     map[devSlot]string
		base      int
		taken     []string
		want      map[devSlot]string
		wantMoved map[devSlot]int
		wantErr   string
	}{
		{
			name: "the layout, all free",
			base: 9092,
			want: map[devSlot]string{
				{devController, 1}: "127.0.0.1:9192",
				{devBroker, 1}:     "127.0.0.1:9292", {devBroker, 2}: "127.0.0.1:9293",
				{devKafka, 1}: "127.0.0.1:9092", {devKafka, 2}: "127.0.0.1:9093",
			},
		},
		{
			name:  "9092 taken: broker 1's Kafka listener moves, the rest stay",
			base:  9092,
			taken: []string{"127.0.0.1:9092"},
			want: map[devSlot]string{
				{devController, 1}: "127.0.0.1:9192",
				{devBroker, 1}:     "127.0.0.1:9292", {devBroker, 2}: "127.0.0.1:9293",
				{devKafka, 1}: "127.0.0.1:0", {devKafka, 2}: "127.0.0.1:9093",
			},
			wantMoved: map[devSlot]int{{devKafka, 1}: 9092},
		},
		{
			name: "free ports throughout",
			want: map[devSlot]string{
				{devController, 1}: "127.0.0.1:0",
				{devBroker, 1}:     "127.0.0.1:0", {devBroker, 2}: "127.0.0.1:0",
				{devKafka, 1}: "127.0.0.1:0", {devKafka, 2}: "127.0.0.1:0",
			},
		},
		{
			name:  "saved addresses win over the layout; a new broker takes its layout port",
			base:  9092,
			saved: map[devSlot]string{{devController, 1}: "127.0.0.1:41000", {devBroker, 1}: "127.0.0.1:41001", {devKafka, 1}: "127.0.0.1:41002"},
			want: map[devSlot]string{
				{devController, 1}: "127.0.0.1:41000",
				{devBroker, 1}:     "127.0.0.1:41001", {devBroker, 2}: "127.0.0.1:9293",
				{devKafka, 1}: "127.0.0.1:41002", {devKafka, 2}: "127.0.0.1:9093",
			},
		},
		{
			name:  "a layout port another listener's saved address holds moves",
			base:  9092,
			saved: map[devSlot]string{{devController, 1}: "127.0.0.1:9093", {devBroker, 1}: "127.0.0.1:41001", {devKafka, 1}: "127.0.0.1:41002"},
			want: map[devSlot]string{
				{devController, 1}: "127.0.0.1:9093",
				{devBroker, 1}:     "127.0.0.1:41001", {devBroker, 2}: "127.0.0.1:9293",
				{devKafka, 1}: "127.0.0.1:41002", {devKafka, 2}: "127.0.0.1:0",
			},
			wantMoved: map[devSlot]int{{devKafka, 2}: 9093},
		},
		{
			name:    "a saved address taken is refused, never moved",
			base:    9092,
			saved:   map[devSlot]string{{devController, 1}: "127.0.0.1:9192", {devKafka, 1}: "127.0.0.1:9092"},
			taken:   []string{"127.0.0.1:9092"},
			wantErr: "127.0.0.1:9092 (broker 1's Kafka listener, saved in /d/dev.json): address already in use: stop what holds it, or give another --data-dir",
		},
		{
			name:    "several taken: the first named, the others counted",
			saved:   map[devSlot]string{{devController, 1}: "127.0.0.1:9192", {devKafka, 1}: "127.0.0.1:9092"},
			taken:   []string{"127.0.0.1:9092", "127.0.0.1:9192"},
			wantErr: "127.0.0.1:9192 (controller 1, saved in /d/dev.json): address already in use (and 1 more saved addresses): stop what holds it, or give another --data-dir",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			saved := tt.saved
			if saved == nil {
				saved = map[devSlot]string{}
			}
			p, err := planDevAddrs(slots, saved, tt.base, takenSet(tt.taken...), path)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.addrs, tt.want) {
				t.Errorf("addrs = %v, want %v", p.addrs, tt.want)
			}
			moved := map[devSlot]int{}
			for s, m := range p.moved {
				moved[s] = m.port
				if m.why == nil {
					t.Errorf("%s moved from %d for no reason", s, m.port)
				}
			}
			if want := tt.wantMoved; len(moved) != 0 || len(want) != 0 {
				if !reflect.DeepEqual(moved, want) {
					t.Errorf("moved = %v, want %v", moved, want)
				}
			}
		})
	}
	p := devPlan{moved: map[devSlot]devMove{{devKafka, 1}: {port: 9092, why: errors.New("address already in use by java (pid 4242)")}}}
	notes := p.movedNotes(slots, func(devSlot) string { return "127.0.0.1:41233" })
	if want := []string{"9092 is taken (address already in use by java (pid 4242)): broker 1's Kafka listener is at 127.0.0.1:41233"}; !reflect.DeepEqual(notes, want) {
		t.Errorf("notes = %q, want %q", notes, want)
	}
}

// TestDevPortInUse: a port held on 127.0.0.1, or on [::1] where localhost
// may lead a client first, is taken; a free one is not.
func TestDevPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := devPortInUse(addr); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("devPortInUse(%s) while held = %v, want address already in use", addr, err)
	} else if by := fmt.Sprintf("(pid %d)", os.Getpid()); runtime.GOOS == "linux" && !strings.HasSuffix(err.Error(), by) {
		t.Errorf("devPortInUse(%s) while this process holds it = %q, want it to end %q", addr, err, by)
	}
	ln.Close()
	if err := devPortInUse(addr); err != nil {
		t.Errorf("devPortInUse(%s) once closed = %v", addr, err)
	}
	ln6, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer ln6.Close()
	_, port, _ := net.SplitHostPort(ln6.Addr().String())
	if err := devPortInUse("127.0.0.1:" + port); !errors.Is(err, syscall.EADDRINUSE) || !strings.HasSuffix(err.Error(), " on [::1], where localhost also leads") {
		t.Errorf("devPortInUse(127.0.0.1:%s) while [::1]:%s is held = %v, want [::1] named", port, port, err)
	}
}

// TestDevState_RoundTripAndDamage: dev.json holds every slot and reads
// back the same; an older file with the controllers only still loads; a
// damaged one is refused in one line naming the file and the listener.
func TestDevState_RoundTripAndDamage(t *testing.T) {
	addrs := map[devSlot]string{}
	for i, s := range devSlots(3, 2, true) {
		addrs[s] = "127.0.0.1:" + strconv.Itoa(30000+i)
	}
	dir := t.TempDir()
	if err := saveDevState(dir, devStateOf(addrs)); err != nil {
		t.Fatal(err)
	}
	st, err := loadDevState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.slots(); !reflect.DeepEqual(got, addrs) {
		t.Errorf("read back %v, want %v", got, addrs)
	}
	if got := (*devState)(nil).slots(); len(got) != 0 {
		t.Errorf("a nil state's slots = %v", got)
	}

	path := filepath.Join(dir, devStateFile)
	tests := []struct {
		name, file, wantErr string
	}{
		{name: "controllers only (an older keel)", file: `{"controllers":["127.0.0.1:1","127.0.0.1:2","127.0.0.1:3"]}`},
		{name: "not JSON", file: `{`, wantErr: path + " is damaged: unexpected end of JSON input"},
		{name: "two controllers", file: `{"controllers":["127.0.0.1:1","127.0.0.1:2"]}`, wantErr: path + " is damaged: 2 controllers, want 1, 3 or 5"},
		{name: "a broker without its Kafka address", file: `{"controllers":["127.0.0.1:1"],"brokers":[{"listen":"127.0.0.1:2"}]}`,
			wantErr: path + ` is damaged: broker 1's Kafka listener: bad address ""`},
		{name: "a bad metrics address", file: `{"controllers":["127.0.0.1:1"],"controller_metrics":["nope"]}`,
			wantErr: path + ` is damaged: controller 1's metrics: bad address "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(tt.file), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := loadDevState(dir)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n")) {
				t.Errorf("loadDevState = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
