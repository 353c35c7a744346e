package bench

import (
	"slices"
	"strings"
	"testing"
)

func TestParseScenarios(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "", want: AllScenarios},
		{in: "all", want: AllScenarios},
		{in: "ALL", want: AllScenarios},
		{in: "create", want: []string{"create"}},
		{in: "load,create", want: []string{"create", "load"}},
		{in: " heartbeats , broker-failure ", want: []string{"heartbeats", "broker-failure"}},
		{in: "create,create,", want: []string{"create"}},
		{in: "create,all", want: AllScenarios},
		{in: "failover,controlled-shutdown", want: []string{"controlled-shutdown", "failover"}},
		{in: "create,bogus", wantErr: `unknown scenario "bogus"`},
		{in: "steady", want: []string{"steady"}},
		{in: "all,steady", want: append(slices.Clone(AllScenarios), "steady")},
		{in: "steady,create", want: []string{"create", "steady"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseScenarios(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--scenarios") {
					t.Fatalf("ParseScenarios(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParseScenarios(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestEveryScenarioSaysWhatItMeasures(t *testing.T) {
	for _, s := range append(slices.Clone(AllScenarios), optionalScenarios...) {
		if measures[s] == "" {
			t.Errorf("scenario %s has no measures text", s)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"defaults", Config{Executable: "keel"}, ""},
		{"running quorum needs no executable", Config{Controllers: []string{"127.0.0.1:9091"}}, ""},
		{"no executable", Config{}, "executable"},
		{"too few brokers", Config{Executable: "keel", Brokers: 2}, "--brokers"},
		{"every broker full", Config{Executable: "keel", Brokers: 6, FullBrokers: 5}, "--full-brokers"},
		{"negative full", Config{Executable: "keel", FullBrokers: -1}, "--full-brokers"},
		{"negative runs", Config{Executable: "keel", Runs: -1}, "--runs"},
		{"negative partitions", Config{Executable: "keel", Partitions: -5}, "--partitions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			err := cfg.check()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Partitions != DefaultPartitions || cfg.Brokers != DefaultBrokers || cfg.Runs != DefaultRuns ||
					!slices.Equal(cfg.Scenarios, AllScenarios) || cfg.HeartbeatInterval != 2e9 {
					t.Fatalf("defaults not filled in: %+v", cfg)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("check() = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}
