package integration

// A refused request must cost the controller nothing: 8 concurrent 4 MiB
// CreateTopic requests made of empty assignments once took a follower from
// 28 MiB to 1.2 GiB, because gRPC decoded them before anyone asked who sent
// them or whether they were within bounds.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// rawCodec sends a request's bytes as they are, so a test can send what no
// proto.Marshal of a sane message would (and without building two million
// messages in the test process to marshal them).
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// emptyAssignments is a CreateTopicRequest of about size bytes holding
// nothing but empty assignments (field 4, length 0: two bytes each).
func emptyAssignments(size int) []byte {
	return bytes.Repeat([]byte{4<<3 | 2, 0}, size/2)
}

// peakRSS is a process's peak resident set (VmHWM), in bytes.
func peakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc to read a process's memory from: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM of pid %d: %q: %v", pid, line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("/proc/%d/status has no VmHWM", pid)
	return 0
}

// rawController is a connection to addr with cn's certificate from pki,
// sending requests as raw bytes.
func rawController(t *testing.T, pki *testPKI, cn, addr string) *grpc.ClientConn {
	t.Helper()
	creds := credentials.NewTLS(pki.config(cn).Client(tlsauth.RoleController))
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestRefusedRequests_CostNoMemory sends a follower the requests of the
// report, 8 at a time, 4 MiB each, all empty assignments: first with a
// broker's certificate (which may never create a topic: refused before the
// request is read), then with an admin's (refused for holding more
// assignments than any request may, before they are decoded). Each is
// refused as before, and the follower's peak resident memory grows by far
// less than one decoded request would take (about 140 MiB each). Each
// certificate's requests go to a follower of their own.
func TestRefusedRequests_CostNoMemory(t *testing.T) {
	pki := newTestPKI(t)
	c := startCluster(t, 3, withTLS(pki))
	leader, _ := c.WaitForActive(t, activeTimeout)
	followers := without(c.IDs(), leader)
	body := emptyAssignments(4<<20 - 64)

	// The bound leaves room for gRPC's buffers (each request is read
	// whole, 4 MiB, and copied once to be checked: about 70 MiB for the
	// eight); one decoded request alone is about 140 MiB. A keel built with
	// the race detector touches about three times as much (its shadow
	// memory), still far below one decoded request's.
	bound := int64(150 << 20)
	if os.Getenv("KEEL_INTEGRATION_RACE") != "" {
		bound = 400 << 20
	}
	// Each certificate's requests go to a follower of their own: a peak
	// (VmHWM) never comes down.
	send := func(t *testing.T, follower int32, cn string, wantCode codes.Code, wantMsg string) {
		t.Helper()
		pid := c.node(follower).Pid()
		cc := rawController(t, pki, cn, c.Addr(follower))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		before := peakRSS(t, pid)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var resp []byte
				errs[i] = cc.Invoke(ctx, keelpb.ControllerService_CreateTopic_FullMethodName, &body, &resp)
			}()
		}
		wg.Wait()
		after := peakRSS(t, pid)
		t.Logf("%s: follower %d peak RSS %d MiB before, %d MiB after 8 concurrent %d-byte requests (+%d MiB)",
			cn, follower, before>>20, after>>20, len(body), (after-before)>>20)
		for _, err := range errs {
			if st := status.Convert(err); st.Code() != wantCode || !strings.Contains(st.Message(), wantMsg) {
				t.Errorf("CreateTopic with %s's certificate: %v; want %v containing %q", cn, err, wantCode, wantMsg)
			}
		}
		if after-before > bound {
			t.Errorf("follower %d's peak RSS grew by %d MiB (from %d MiB to %d MiB); want at most %d MiB",
				follower, (after-before)>>20, before>>20, after>>20, bound>>20)
		}
	}
	// Brokers may create topics for the admin clients whose CreateTopics
	// they forward; a controller may not.
	t.Run("a controller's certificate", func(t *testing.T) {
		send(t, followers[0], "controller-1", codes.PermissionDenied, "CreateTopic needs an admin certificate; the caller's is controller-1")
	})
	t.Run("an admin's certificate", func(t *testing.T) {
		send(t, followers[1], "admin", codes.InvalidArgument, "assignments: ")
	})

	// The followers are unharmed and the quorum still commits.
	c.requireRunning(t, followers)
	written := c.appendNoOp(t, 10*time.Second).GetIndex()
	c.WaitForConverged(t, c.IDs(), written)
}
