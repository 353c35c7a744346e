package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/keel-dev/keel/proto/keelpb"
)

// Each mistake an operator makes in the first hour gets one line that says
// what to do, not gRPC's words for it.
func TestMessages_BadAdminFlags(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"controllers without a port", []string{"topic", "list", "--controllers", "garbage"},
			`--controllers: bad address "garbage": missing port in address (want host:port, e.g. 127.0.0.1:9091)`},
		{"controllers with an empty port", []string{"topic", "list", "--controllers", "127.0.0.1:9091,garbage:"}, `bad address "garbage:"`},
		{"a zero timeout", []string{"topic", "list", "--timeout", "0"}, "--timeout 0s: want a positive duration"},
		{"a negative timeout", []string{"topic", "create", "t", "--partitions", "1", "--replication-factor", "1", "--timeout", "-1s"}, "--timeout -1s: want a positive duration"},
		{"a zero timeout to a broker", []string{"broker", "inspect", "--address", "127.0.0.1:9201", "--timeout", "0"}, "--timeout 0s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, err := runKeel(t, tt.args...)
			if err == nil || !strings.Contains(errorLine(err), tt.want) || strings.Contains(errorLine(err), "\n") {
				t.Fatalf("keel %s: err = %v, want one line containing %q", strings.Join(tt.args, " "), err, tt.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v: the flag should be refused before anything is dialled", d)
			}
		})
	}
}

// A write to addresses where nothing listens fails as fast as a read does.
func TestMessages_WriteToNothingListeningFailsFast(t *testing.T) {
	dead := freeAddr(t)
	for _, args := range [][]string{
		{"topic", "list"},
		{"topic", "create", "t", "--partitions", "1", "--replication-factor", "1"},
		{"topic", "delete", "t"},
		{"broker", "drain", "--broker-id", "1"},
		{"config", "describe"},
	} {
		start := time.Now()
		_, err := runKeel(t, append(args, "--controllers", dead, "--timeout", "20s")...)
		if err == nil || !strings.Contains(errorLine(err), "Unavailable") || !strings.Contains(errorLine(err), dead) {
			t.Errorf("keel %s: err = %v, want Unavailable naming %s", strings.Join(args, " "), err, dead)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("keel %s against nothing listening took %v, want milliseconds (not the 20s timeout)", strings.Join(args, " "), d)
		}
	}
}

func TestMessages_SnapshotRestoreNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "backup.snap")
	if err := os.WriteFile(bad, []byte("not a snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{bad, filepath.Join(dir, "missing.snap")} {
		out, err := runKeel(t, "snapshot", "restore", file, "--controllers", freeAddr(t))
		if err == nil || !strings.HasPrefix(errorLine(err), file+": ") || out != "" {
			t.Errorf("restore %s: err = %v, out %q; want one line starting with the file's name", file, err, out)
		}
	}
}

func TestMessages_SnapshotHelpMentionsRestore(t *testing.T) {
	out, err := runKeel(t, "snapshot", "--help")
	if err != nil {
		t.Fatal(err)
	}
	first := strings.SplitN(out, "\n", 2)[0]
	if !strings.Contains(first, "restore") {
		t.Errorf("keel snapshot --help begins %q; want it to mention restore", first)
	}
	root, err := runKeel(t, "--help")
	if err != nil || !strings.Contains(root, "restore snapshots") {
		t.Errorf("keel --help: the snapshot line does not mention restore:\n%s", root)
	}
}

func TestVersion(t *testing.T) {
	out, err := runKeel(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Version:", "Commit:", "Go version:  " + runtime.Version()} {
		if !strings.Contains(out, want) {
			t.Errorf("keel version lacks %q:\n%s", want, out)
		}
	}
	out, err = runKeel(t, "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Version == "" || v.Commit == "" || v.GoVersion != runtime.Version() {
		t.Errorf("keel version -o json = %q (%v); want version, commit and go_version", out, err)
	}
	if _, err := runKeel(t, "version", "extra"); err == nil {
		t.Error("keel version extra: no error")
	}
}

// Admin commands pointed at a broker say so, for reads, writes and the
// quorum's status alike.
func TestMessages_ABrokerIsNotAController(t *testing.T) {
	addr := serveGRPC(t, func(g *grpc.Server) {
		keelpb.RegisterBrokerServiceServer(g, &fakeInspect{resp: &keelpb.InspectResponse{BrokerId: 2}})
	})
	want := addr + " is broker 2, not a controller: give the controllers' addresses (--controllers)"
	for _, args := range [][]string{
		{"topic", "list"},
		{"topic", "create", "t", "--partitions", "1", "--replication-factor", "1"},
		{"quorum", "status"},
	} {
		_, err := runKeel(t, append(args, "--controllers", addr)...)
		if err == nil || !strings.Contains(errorLine(err), want) {
			t.Errorf("keel %s at a broker: err = %v, want %q", strings.Join(args, " "), err, want)
		}
	}
}
