//go:build linux

package partlog

import (
	"errors"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// TestLog_RollOutOfDescriptorsRefusesWriteOnly: a roll that finds no file
// descriptor left (EMFILE: connections took them all) refuses that write
// with ErrNoDescriptors, leaves no file behind and does not fail the log
// (OnFail is not called): once descriptors are free the same write rolls
// and succeeds, and every batch is read back, after a reopen too. A full
// or broken disk still fails the log (TestLog_FailedWriteTellsOnFailOnce).
func TestLog_RollOutOfDescriptorsRefusesWriteOnly(t *testing.T) {
	for _, tt := range []struct {
		name string
		// spare is how many more files the roll may open: 0 fails it
		// opening the new segment, 2 (its log and index) writing the
		// recovery checkpoint after it.
		spare int
	}{
		{name: "new segment", spare: 0},
		{name: "recovery checkpoint", spare: 2},
	} {
		t.Run(tt.name, func(t *testing.T) { rollOutOfDescriptors(t, tt.spare) })
	}
}

func rollOutOfDescriptors(t *testing.T, spare int) {
	dir := t.TempDir()
	var failures []error
	cfg := Config{SegmentBytes: 61, OnFail: func(err error) { failures = append(failures, err) }}
	l, err := Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, spec{records: 3}, 0)
	before, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}

	// The process may open spare more files: its limit is lowered to a
	// little above its highest descriptor, and the rest filled.
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	highest := 0
	for _, fd := range fds {
		n, _ := strconv.Atoi(fd.Name())
		highest = max(highest, n)
	}
	low := old
	low.Cur = uint64(highest + 64)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("cannot lower the open-files limit: %v", err)
	}
	var fillers []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		fillers = append(fillers, f)
	}
	for _, f := range fillers[len(fillers)-spare:] {
		f.Close()
	}
	batch := makeBatch(t, spec{records: 2})
	_, appendErr := l.Append(batch, 0)
	for _, f := range fillers[:len(fillers)-spare] {
		f.Close()
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(appendErr, ErrNoDescriptors) {
		t.Fatalf("Append that must roll, with no descriptor left: %v; want ErrNoDescriptors", appendErr)
	}
	if len(failures) != 0 {
		t.Fatalf("OnFail called (%v): running out of descriptors is not a broken disk", failures)
	}
	after, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if spare == 0 && len(after) != len(before) {
		t.Errorf("the refused roll left files: %v in the log dir, %v before", after, before)
	}
	if got := l.LogEndOffset(); got != 3 {
		t.Errorf("log end after the refused write: %d; want 3", got)
	}

	if info, err := l.Append(batch, 0); err != nil || info.FirstOffset != 3 {
		t.Fatalf("the same Append with descriptors free: %+v, %v; want it at offset 3", info, err)
	}
	if hs := readAll(t, l); len(hs) != 2 || hs[1].LastOffset() != 4 {
		t.Fatalf("batches %+v; want both", hs)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Config{})
	if hs := readAll(t, l); len(hs) != 2 || hs[1].LastOffset() != 4 {
		t.Fatalf("reopened: batches %+v; want both", hs)
	}
}
