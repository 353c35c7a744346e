package keelproc

import (
	"context"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/internal/poll"
)

func TestParseStat(t *testing.T) {
	// The tail after field 17 is a real line's (proc(5)), cut short.
	const tail = " 20 0 1 0 5732610 3133440 377 18446744073709551615 0"
	for _, tc := range []struct {
		name    string
		line    string
		want    Stat
		wantErr string
	}{
		{
			name: "plain name",
			line: "11892 (cat) R 11890 11890 9536 0 -1 4194304 99 0 0 0 12 3 4 5" + tail,
			want: Stat{UTime: 12, STime: 3, CUTime: 4, CSTime: 5},
		},
		{
			name: "name with spaces",
			line: "7 (keel broker) S 1 7 7 0 -1 4194560 5000 0 0 0 250 75 0 0" + tail,
			want: Stat{UTime: 250, STime: 75},
		},
		{
			name: "name with parentheses and a fake field list",
			line: "8 (a) S 1 2 3 (b)) S 1 8 8 0 -1 0 0 0 0 0 1 2 3 4" + tail,
			want: Stat{UTime: 1, STime: 2, CUTime: 3, CSTime: 4},
		},
		{
			name: "trailing newline",
			line: "9 (x) R 1 9 9 0 -1 0 0 0 0 0 100 0 0 0" + tail + "\n",
			want: Stat{UTime: 100},
		},
		{name: "no name", line: "9 x R 1 9 9", wantErr: "no command name"},
		{name: "cut short", line: "9 (x) R 1 9 9 0 -1 0 0 0 0 0 100", wantErr: "fields after the command name"},
		{name: "not a number", line: "9 (x) R 1 9 9 0 -1 0 0 0 0 0 1x 0 0 0" + tail, wantErr: "field 14"},
		{name: "negative", line: "9 (x) R 1 9 9 0 -1 0 0 0 0 0 1 0 -1 0" + tail, wantErr: "field 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseStat(tc.line)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestStat_CPU(t *testing.T) {
	if got, want := (Stat{UTime: 150, STime: 50, CUTime: 20, CSTime: 5}).CPU(), 2250*time.Millisecond; got != want {
		t.Errorf("CPU() = %v, want %v", got, want)
	}
}

// TestProc_CPUTime: a process's CPU time while it runs (from /proc), and
// after it has exited (from its reaping), which is at least as much.
func TestProc_CPUTime(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// A busy loop of a second or so.
	p, err := StartProc(sh, nil, nil, nil, "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(time.Second) })
	var running time.Duration
	// Until the first tick is counted, or the loop has ended.
	err = poll.Wait(context.Background(), time.Minute, 10*time.Millisecond, "a CPU tick", func() (bool, error) {
		d, err := p.CPUTime()
		running = d
		return d > 0 || !p.Running(), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Wait(time.Minute) {
		t.Fatal("the busy loop did not end within a minute")
	}
	exited, err := p.CPUTime()
	if err != nil {
		t.Fatal(err)
	}
	if exited <= 0 || exited < running {
		t.Errorf("CPU time %v after the exit, %v while running: want more than 0, and at least the running figure", exited, running)
	}
}
