package main

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"1000000", 1000000, ""},
		{"10MB", 10_000_000, ""},
		{"50MiB", 50 << 20, ""},
		{" 2 MB/s ", 2_000_000, ""},
		{"512KiB", 512 << 10, ""},
		{"1GB", 1_000_000_000, ""},
		{"100B", 100, ""},
		{"0", 0, "above 0"},
		{"-5MB", 0, "above 0"},
		{"1.5MB", 0, "want bytes/s"},
		{"10mb", 0, "want bytes/s"},
		{"fast", 0, "want bytes/s"},
		{"9223372036854775807GiB", 0, "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseRate(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseRate = %d, %v; want an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseRate = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

// TestThrottle_OnlyWithMoves: --throttle goes with the forms that start
// moves, and is refused, before any RPC, with the others.
func TestThrottle_OnlyWithMoves(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"reassign --cancel", []string{"partition", "reassign", "--topic", "t", "--partition", "0", "--cancel", "--throttle", "1MB"}, "not with --cancel"},
		{"reassign --verify", []string{"partition", "reassign", "--verify", "x.json", "--throttle", "1MB"}, "not with --verify"},
		{"reassign --generate", []string{"partition", "reassign", "--generate", "--topics", "t", "--brokers", "1", "--throttle", "1MB"}, "not with --generate"},
		{"reassign, a bad rate", []string{"partition", "reassign", "--topic", "t", "--partition", "0", "--replicas", "1", "--throttle", "1.5MB"}, "--throttle: \"1.5MB\""},
		{"drain --cancel", []string{"broker", "drain", "--broker-id", "1", "--cancel", "--throttle", "1MB"}, "not with --cancel"},
		{"drain, a zero rate", []string{"broker", "drain", "--broker-id", "1", "--throttle", "0"}, "above 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runKeel(t, append(tt.args, "--controllers", "127.0.0.1:1")...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func (f *fakeCluster) DescribeConfigs(_ context.Context, req *keelpb.DescribeConfigsRequest) (*keelpb.DescribeConfigsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &keelpb.DescribeConfigsResponse{}
	for _, k := range slices.Sorted(maps.Keys(f.configs)) {
		resp.Configs = append(resp.Configs, &keelpb.ConfigEntry{Name: k, Value: f.configs[k], Source: keelpb.ConfigSource_CONFIG_SOURCE_CLUSTER_DEFAULT})
	}
	return resp, nil
}

func (f *fakeCluster) IncrementalAlterConfigs(_ context.Context, req *keelpb.IncrementalAlterConfigsRequest) (*keelpb.IncrementalAlterConfigsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.configs == nil {
		f.configs = map[string]string{}
	}
	for _, c := range req.GetConfigs() {
		if c.GetOp() == keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE {
			delete(f.configs, c.GetName())
		} else {
			f.configs[c.GetName()] = c.GetValue()
		}
	}
	return &keelpb.IncrementalAlterConfigsResponse{}, nil
}

// TestThrottle_SetBeforeTheMoves: --throttle sets both rates before the
// moves start, 'keel partition reassignments' shows them, and a move that
// completed at once leaves no throttle behind.
func TestThrottle_SetBeforeTheMoves(t *testing.T) {
	f := newFakeCluster("1,2,3,4,5", map[string][][]int32{"orders": {{1, 2, 3}, {2, 3, 4}}})
	addr := f.serve(t)
	if out, err := runKeel(t, "broker", "drain", "--controllers", addr, "--broker-id", "4", "--no-wait", "--throttle", "2MB"); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	out, err := runKeel(t, "partition", "reassignments", "--controllers", addr)
	if err != nil || !strings.Contains(out, "Replication throttle: leader 2000000 B/s, follower 2000000 B/s") {
		t.Fatalf("reassignments: %v\n%s", err, out)
	}
	out, err = runKeel(t, "partition", "reassignments", "--controllers", addr, "-o", "json")
	var rows []reassignmentRow
	if err != nil || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].LeaderThrottledRate == nil || *rows[0].FollowerThrottledRate != 2000000 {
		t.Fatalf("reassignments -o json: %v\n%s", err, out)
	}
	f.completeAll()
	f.configs = nil
	// A new order completes at once: nothing is left in progress, so the
	// command lifts what it set.
	if out, err := runKeel(t, "partition", "reassign", "--controllers", addr, "--topic", "orders", "--partition", "0",
		"--replicas", "3,2,1", "--throttle", "1MiB"); err != nil {
		t.Fatalf("reassign: %v\n%s", err, out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.configs) != 0 {
		t.Fatalf("configs %v after a move that completed at once; want none", f.configs)
	}
}
