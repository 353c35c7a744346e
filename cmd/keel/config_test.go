package main

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/keel-dev/keel/raftlog"
)

// printedSettings parses --print-config output: each setting's value, and
// where it came from (the line's comment).
func printedSettings(t *testing.T, out string) (values map[string]any, from map[string]string) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(out), &values); err != nil {
		t.Fatalf("--print-config output is not YAML: %v\n%s", err, out)
	}
	from = make(map[string]string)
	for line := range strings.Lines(out) {
		if key, rest, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, " ") {
			if _, comment, ok := strings.Cut(rest, " # "); ok {
				from[key] = strings.TrimSpace(comment)
			}
		}
	}
	return values, from
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfig_ControllerPrintConfig runs `keel controller --config F
// --print-config` with KEEL_* variables and a flag over the file, then feeds
// the printed settings back and wants the same values.
func TestConfig_ControllerPrintConfig(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	file := writeFile(t, filepath.Join(dir, "controller.yaml"), `
node-id: 2
data-dir: `+dataDir+`
voters: "1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093"
listen: 127.0.0.1:1         # the flag wins
write-timeout: 5s           # KEEL_WRITE_TIMEOUT wins
raft-heartbeat-timeout: 400ms
snapshot-threshold: 100
log-format: json
`)
	t.Setenv("KEEL_CONTROLLER_WRITE_TIMEOUT", "7s")
	t.Setenv("KEEL_CONTROLLER_LOG_LEVEL", "debug")
	t.Setenv("KEEL_CONTROLLER_TLS_CA", "/etc/keel/tls/ca.pem")
	t.Setenv("KEEL_CONTROLLER_PRINT_CONFIG", "false") // reserved: no effect
	// The CLI's, left in the shell: ignored, and said so.
	t.Setenv("KEEL_TLS_CERT", "/home/op/admin.pem")
	t.Setenv("KEEL_SNAPSHOT_THRESHOLD", "1")
	out, errOut, err := runBench(t, context.Background(), "controller", "--config", file, "--print-config", "--listen", "127.0.0.1:2")
	if err != nil || errOut != "" {
		t.Fatalf("err = %v, stderr %q", err, errOut)
	}
	values, from := printedSettings(t, out)
	for key, want := range map[string]struct {
		value any
		from  string
	}{
		"node-id":                {2, "file " + file},
		"data-dir":               {dataDir, "file " + file},
		"listen":                 {"127.0.0.1:2", "flag"},
		"write-timeout":          {"7s", "env KEEL_CONTROLLER_WRITE_TIMEOUT"},
		"raft-heartbeat-timeout": {"400ms", "file " + file},
		"raft-election-timeout":  {"300ms", "default"},
		"snapshot-threshold":     {100, "file " + file},
		"log-level":              {"debug", "env KEEL_CONTROLLER_LOG_LEVEL"},
		"log-format":             {"json", "file " + file},
		"tls-ca":                 {"/etc/keel/tls/ca.pem", "env KEEL_CONTROLLER_TLS_CA"},
		"tls-cert":               {"", "default"},
		"cluster-id":             {"", "default"},
	} {
		if values[key] != want.value || from[key] != want.from {
			t.Errorf("%s: %v (%s), want %v (%s)", key, values[key], from[key], want.value, want.from)
		}
	}
	for _, line := range []string{
		"# keel controller: the effective settings (after each: flag, env KEEL_CONTROLLER_*, file or default).",
		"# Ignored KEEL_SNAPSHOT_THRESHOLD, the CLI's: this command reads KEEL_CONTROLLER_SNAPSHOT_THRESHOLD.",
		"# Ignored KEEL_TLS_CERT, the CLI's: this command reads KEEL_CONTROLLER_TLS_CERT.",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("no line %q in\n%s", line, out)
		}
	}
	for _, reserved := range []string{"config", "print-config", "help"} {
		if _, ok := values[reserved]; ok {
			t.Errorf("prints --%s", reserved)
		}
	}
	if _, err := raftlog.ParseVoters(values["voters"].(string)); err != nil {
		t.Errorf("printed voters: %v", err)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("--print-config touched the data dir: %v", err)
	}

	// Fed back, through KEEL_CONTROLLER_CONFIG this time, with the variables unset
	// (empty): every value now comes from the printed file, unchanged.
	printed := writeFile(t, filepath.Join(dir, "printed.yaml"), out)
	t.Setenv("KEEL_CONTROLLER_CONFIG", printed)
	t.Setenv("KEEL_CONTROLLER_WRITE_TIMEOUT", "")
	t.Setenv("KEEL_CONTROLLER_LOG_LEVEL", "")
	t.Setenv("KEEL_CONTROLLER_TLS_CA", "")
	again, _, err := runBench(t, context.Background(), "controller", "--print-config")
	if err != nil {
		t.Fatalf("printed config fed back: %v\n%s", err, out)
	}
	values2, from2 := printedSettings(t, again)
	if !reflect.DeepEqual(values2, values) {
		t.Errorf("fed back:\n%s\nfirst:\n%s", again, out)
	}
	for key, src := range from2 {
		if src != "file "+printed {
			t.Errorf("fed back, %s comes from %s", key, src)
		}
	}
}

func TestConfig_Errors(t *testing.T) {
	dir := t.TempDir()
	brokerFile := writeFile(t, filepath.Join(dir, "broker.yaml"), "data-dir: /d\nbroker-id: 1\n")
	typo := writeFile(t, filepath.Join(dir, "typo.yaml"), "node-id: 1\ndata_dir: /d\n")
	badInt := writeFile(t, filepath.Join(dir, "bad-int.yaml"), "node-id: one\n")
	badDuration := writeFile(t, filepath.Join(dir, "bad-duration.yaml"), "heartbeat-interval: 2\n")
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		wantErr []string
	}{
		{"another command's file", nil, []string{"controller", "--config", brokerFile},
			[]string{brokerFile + `:2: unknown key "broker-id": keel controller has no --broker-id flag`}},
		{"a typo", nil, []string{"controller", "--config", typo}, []string{typo + ":2:", `"data_dir"`, "did you mean data-dir?"}},
		{"a controller file for an admin command", nil, []string{"quorum", "status", "--config", typo}, []string{`unknown key "node-id": keel quorum status has no --node-id flag`}},
		{"a wrong type", nil, []string{"controller", "--config", badInt}, []string{badInt + ":1:", "--node-id", `"one"`}},
		{"a duration without a unit", nil, []string{"broker", "--config", badDuration}, []string{badDuration + ":1:", "--heartbeat-interval", "missing unit"}},
		{"a variable of the wrong type", map[string]string{"KEEL_CONTROLLER_SESSION_TIMEOUT": "soon"}, []string{"controller"}, []string{"KEEL_CONTROLLER_SESSION_TIMEOUT:", "--session-timeout"}},
		{"no such file", nil, []string{"controller", "--config", filepath.Join(dir, "none.yaml")}, []string{"--config: open " + filepath.Join(dir, "none.yaml")}},
		{"no such file from KEEL_BROKER_CONFIG", map[string]string{"KEEL_BROKER_CONFIG": filepath.Join(dir, "none.yaml")}, []string{"broker"}, []string{"KEEL_BROKER_CONFIG: open " + filepath.Join(dir, "none.yaml")}},
		{"no such file from KEEL_CONFIG", map[string]string{"KEEL_CONFIG": filepath.Join(dir, "none.yaml")}, []string{"topic", "list"}, []string{"KEEL_CONFIG: open " + filepath.Join(dir, "none.yaml")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := runKeel(t, tt.args...)
			if err == nil {
				t.Fatalf("no error, want %q", tt.wantErr)
			}
			line := errorLine(err)
			for _, w := range tt.wantErr {
				if !strings.Contains(line, w) || strings.Contains(line, "\n") {
					t.Errorf("err = %q, want one line holding %q", line, w)
				}
			}
		})
	}
}

// TestConfig_HelpIgnoresTheFile: help and completion work whatever file
// KEEL_CONFIG or KEEL_CONTROLLER_CONFIG names.
func TestConfig_HelpIgnoresTheFile(t *testing.T) {
	t.Setenv("KEEL_CONFIG", writeFile(t, filepath.Join(t.TempDir(), "c.yaml"), "node-id: 1\n"))
	t.Setenv("KEEL_CONTROLLER_CONFIG", os.Getenv("KEEL_CONFIG"))
	for _, args := range [][]string{{"help", "controller"}, {"completion", "bash"}, {"__complete", "controller", "--data"}} {
		if out, err := runKeel(t, args...); err != nil || out == "" {
			t.Errorf("keel %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestConfig_RequiredFlagFromEnv: a value from a variable counts as given,
// so cobra's required-flag check (metadata dump --data-dir) passes.
func TestConfig_RequiredFlagFromEnv(t *testing.T) {
	t.Setenv("KEEL_DATA_DIR", t.TempDir())
	_, _, err := runDump(t)
	if err == nil || !strings.Contains(err.Error(), "has no raft.db") {
		t.Errorf("err = %v, want the data dir from KEEL_DATA_DIR to be read", err)
	}
}

// TestConfig_DeployExamples runs each systemd unit's ExecStart, with its
// config file swapped for the example in deploy/, and --print-config: the
// examples must load through the real command's flags, set every value they
// name, and agree with their unit.
func TestConfig_DeployExamples(t *testing.T) {
	for _, name := range []string{"controller", "broker"} {
		t.Run(name, func(t *testing.T) {
			unit := readUnit(t, filepath.Join("..", "..", "deploy", "keel-"+name+".service"))
			example := filepath.Join("..", "..", "deploy", name+".yaml")
			args := strings.Fields(unit["ExecStart"])
			if len(args) != 4 || args[0] != "/usr/local/bin/keel" || args[1] != name || args[2] != "--config" || args[3] != "/etc/keel/"+name+".yaml" {
				t.Fatalf("ExecStart=%s", unit["ExecStart"])
			}
			out, errOut, err := runBench(t, context.Background(), name, "--config", example, "--print-config")
			if err != nil || errOut != "" {
				t.Fatalf("%s: %v %s", example, err, errOut)
			}
			values, from := printedSettings(t, out)
			data, err := os.ReadFile(example)
			if err != nil {
				t.Fatal(err)
			}
			var inFile map[string]any
			if err := yaml.Unmarshal(data, &inFile); err != nil {
				t.Fatal(err)
			}
			for key := range inFile {
				if from[key] != "file "+example {
					t.Errorf("%s: %s comes from %q", example, key, from[key])
				}
			}
			if got, want := unit["ReadWritePaths"], values["data-dir"]; got != want || "/var/lib/"+unit["StateDirectory"] != want {
				t.Errorf("unit ReadWritePaths=%s StateDirectory=%s, but data-dir: %v", got, unit["StateDirectory"], want)
			}
			stop, err := time.ParseDuration(unit["TimeoutStopSec"])
			if err != nil {
				t.Fatalf("TimeoutStopSec=%s: %v", unit["TimeoutStopSec"], err)
			}
			// The example must start: with TLS, or saying --insecure.
			str := func(key string) string { v, _ := values[key].(string); return v }
			insecure, _ := values["insecure"].(bool)
			var addrs []flagAddr
			switch name {
			case "controller":
				vs, err := raftlog.ParseVoters(str("voters"))
				if err != nil {
					t.Error(err)
				}
				dial, err := raftlog.ParseRaftDial(str("raft-dial"))
				if err != nil {
					t.Error(err)
				}
				addrs = controllerAddrs(str("listen"), vs, dial, str("metrics-addr"))
			case "broker":
				addrs = brokerAddrs(str("listen"), str("advertise"), splitAddrs(str("controllers")), str("metrics-addr"))
			}
			anyTLS := str("tls-cert") != "" || str("tls-key") != "" || str("tls-ca") != ""
			if anyTLS && (str("tls-cert") == "" || str("tls-key") == "" || str("tls-ca") == "") {
				t.Errorf("%s: give tls-cert, tls-key and tls-ca together", example)
			}
			if _, err := checkPlaintext(anyTLS, insecure, addrs); err != nil {
				t.Errorf("%s would be refused: %v", example, err)
			}
			switch name {
			case "controller":
			case "broker":
				shutdown, err := time.ParseDuration(values["controlled-shutdown-timeout"].(string))
				if err != nil {
					t.Fatal(err)
				}
				if stop <= shutdown+stopGrace {
					t.Errorf("TimeoutStopSec=%v: systemd would kill a broker still in its controlled shutdown (%v) or stopping (%v)",
						stop, shutdown, stopGrace)
				}
			}
			for _, key := range []string{"User", "Restart", "KillSignal", "LimitNOFILE", "NoNewPrivileges", "ProtectSystem"} {
				if unit[key] == "" {
					t.Errorf("unit has no %s=", key)
				}
			}
		})
	}
}

// readUnit reads a systemd unit's Key=Value lines (the last of a key wins).
func readUnit(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := make(map[string]string)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			out[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestConfig_ActionFlagsAreNotSettings: an admin command takes where the
// cluster is from the environment, never what to do.
func TestConfig_ActionFlagsAreNotSettings(t *testing.T) {
	t.Setenv("KEEL_ALL", "true")
	t.Setenv("KEEL_CONTROLLERS", "127.0.0.1:1")
	_, err := runKeel(t, "partition", "elect", "--type", "preferred", "--timeout", "100ms")
	if err == nil || !strings.Contains(err.Error(), "give --topic T [--partition P], or --all") {
		t.Fatalf("err = %v; want --all left unset despite KEEL_ALL", err)
	}

	file := writeFile(t, filepath.Join(t.TempDir(), "c.yaml"), "all: true\n")
	_, err = runKeel(t, "--config", file, "partition", "elect", "--type", "preferred")
	if err == nil || !strings.Contains(err.Error(), "--all is not a setting") {
		t.Fatalf("err = %v; want a file naming --all refused", err)
	}

	// The connection setting did apply: the command dialled KEEL_CONTROLLERS.
	_, err = runKeel(t, "partition", "elect", "--type", "preferred", "--topic", "t", "--timeout", "100ms")
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("err = %v; want a failure to reach KEEL_CONTROLLERS' 127.0.0.1:1", err)
	}
}
