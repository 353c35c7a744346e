package config

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// testFlags is a command's flag set with one flag of each kind keel uses,
// plus the reserved ones.
func testFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.String("data-dir", "", "")
	fs.String("listen", "127.0.0.1:9091", "")
	fs.Int32("node-id", 0, "")
	fs.Uint64("snapshot-threshold", 8192, "")
	fs.Duration("raft-heartbeat-timeout", time.Second, "")
	fs.Bool("tls", false, "")
	fs.StringSlice("type", []string{"a", "b"}, "")
	fs.StringArray("setting", nil, "")
	fs.StringP("output", "o", "text", "")
	fs.Bool("help", false, "")
	fs.String("config", "", "")
	fs.Bool("print-config", false, "")
	return fs
}

func fakeEnv(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// values is every settable flag's value as the command line would show it.
func values(fs *pflag.FlagSet) map[string]string {
	out := make(map[string]string)
	fs.VisitAll(func(f *pflag.Flag) {
		if Settable(f) {
			out[f.Name] = f.Value.String()
		}
	})
	return out
}

func TestEnvName(t *testing.T) {
	for _, tt := range []struct{ process, flag, want string }{
		{"", "data-dir", "KEEL_DATA_DIR"},
		{"", "raft-heartbeat-timeout", "KEEL_RAFT_HEARTBEAT_TIMEOUT"},
		{"", "tls-cert", "KEEL_TLS_CERT"},
		{"", "config", "KEEL_CONFIG"},
		{"", "o", "KEEL_O"},
		{"controller", "data-dir", "KEEL_CONTROLLER_DATA_DIR"},
		{"broker", "tls-key", "KEEL_BROKER_TLS_KEY"},
		{"dev", "log-level", "KEEL_DEV_LOG_LEVEL"},
		{"controller", "config", "KEEL_CONTROLLER_CONFIG"},
	} {
		if got := EnvName(tt.process, tt.flag); got != tt.want {
			t.Errorf("EnvName(%q, %q) = %q, want %q", tt.process, tt.flag, got, tt.want)
		}
	}
	if got := EnvPattern("broker"); got != "KEEL_BROKER_*" {
		t.Errorf("EnvPattern(broker) = %q", got)
	}
	if got := EnvPattern(""); got != "KEEL_*" {
		t.Errorf("EnvPattern() = %q", got)
	}
}

// TestApply_ProcessEnv: a process reads its own variables and none of the
// CLI's; the CLI reads none of a process's.
func TestApply_ProcessEnv(t *testing.T) {
	env := map[string]string{
		"KEEL_DATA_DIR": "/cli", "KEEL_TLS": "true", "KEEL_CONFIG": "cli.yaml", "KEEL_LISTEN": "",
		"KEEL_CONTROLLER_DATA_DIR": "/controller", "KEEL_BROKER_NODE_ID": "9",
	}
	tests := []struct {
		process     string
		want        map[string]string
		wantSrc     map[string]string
		wantIgnored []Ignored
	}{
		{
			process: "",
			want:    map[string]string{"data-dir": "/cli", "tls": "true"},
			wantSrc: map[string]string{"data-dir": "env KEEL_DATA_DIR", "tls": "env KEEL_TLS"},
		},
		{
			process: "controller",
			want:    map[string]string{"data-dir": "/controller"},
			wantSrc: map[string]string{"data-dir": "env KEEL_CONTROLLER_DATA_DIR"},
			// Flag order; KEEL_LISTEN is empty, so unset.
			wantIgnored: []Ignored{{"KEEL_CONFIG", "KEEL_CONTROLLER_CONFIG"}, {"KEEL_DATA_DIR", "KEEL_CONTROLLER_DATA_DIR"}, {"KEEL_TLS", "KEEL_CONTROLLER_TLS"}},
		},
		{
			process:     "broker",
			want:        map[string]string{"node-id": "9"},
			wantSrc:     map[string]string{"node-id": "env KEEL_BROKER_NODE_ID"},
			wantIgnored: []Ignored{{"KEEL_CONFIG", "KEEL_BROKER_CONFIG"}, {"KEEL_DATA_DIR", "KEEL_BROKER_DATA_DIR"}, {"KEEL_TLS", "KEEL_BROKER_TLS"}},
		},
	}
	for _, tt := range tests {
		t.Run("process "+tt.process, func(t *testing.T) {
			fs := testFlags()
			want := values(fs)
			src, err := Apply("keel test", tt.process, fs, fakeEnv(env), nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				want[k] = v
			}
			if got := values(fs); !reflect.DeepEqual(got, want) {
				t.Errorf("values = %v, want %v", got, want)
			}
			for name, s := range src {
				if w, ok := tt.wantSrc[name]; ok && s.String() != w || !ok && s.Kind != FromDefault {
					t.Errorf("%s from %s, want %q", name, s, w)
				}
			}
			if got := IgnoredEnv(tt.process, testFlags(), fakeEnv(env)); !reflect.DeepEqual(got, tt.wantIgnored) {
				t.Errorf("IgnoredEnv = %v, want %v", got, tt.wantIgnored)
			}
		})
	}
}

func TestApply_Precedence(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		file    string
		want    map[string]string // flag: value; the rest keep their defaults
		wantSrc map[string]string // flag: Source.String(); the rest "default"
	}{
		{
			name: "defaults",
		},
		{
			name:    "file over default",
			file:    "data-dir: /var/lib/keel\nnode-id: 3\n",
			want:    map[string]string{"data-dir": "/var/lib/keel", "node-id": "3"},
			wantSrc: map[string]string{"data-dir": "file keel.yaml", "node-id": "file keel.yaml"},
		},
		{
			name:    "env over file",
			env:     map[string]string{"KEEL_DATA_DIR": "/env", "KEEL_LISTEN": ":1"},
			file:    "data-dir: /file\nnode-id: 3\n",
			want:    map[string]string{"data-dir": "/env", "node-id": "3", "listen": ":1"},
			wantSrc: map[string]string{"data-dir": "env KEEL_DATA_DIR", "node-id": "file keel.yaml", "listen": "env KEEL_LISTEN"},
		},
		{
			name:    "flag over env and file",
			args:    []string{"--data-dir", "/flag", "-o", "json"},
			env:     map[string]string{"KEEL_DATA_DIR": "/env", "KEEL_OUTPUT": "yaml"},
			file:    "data-dir: /file\noutput: table\n",
			want:    map[string]string{"data-dir": "/flag", "output": "json"},
			wantSrc: map[string]string{"data-dir": "flag", "output": "flag"},
		},
		{
			name:    "an empty variable is unset",
			env:     map[string]string{"KEEL_DATA_DIR": ""},
			file:    "data-dir: /file\n",
			want:    map[string]string{"data-dir": "/file"},
			wantSrc: map[string]string{"data-dir": "file keel.yaml"},
		},
		{
			name:    "an empty string in the file is a value",
			file:    `listen: ""`,
			want:    map[string]string{"listen": ""},
			wantSrc: map[string]string{"listen": "file keel.yaml"},
		},
		{
			name: "durations, numbers and booleans as YAML writes them",
			file: "raft-heartbeat-timeout: 300ms\nsnapshot-threshold: 0x10\ntls: true\nnode-id: \"7\"\n",
			want: map[string]string{"raft-heartbeat-timeout": "300ms", "snapshot-threshold": "16", "tls": "true", "node-id": "7"},
			wantSrc: map[string]string{"raft-heartbeat-timeout": "file keel.yaml", "snapshot-threshold": "file keel.yaml",
				"tls": "file keel.yaml", "node-id": "file keel.yaml"},
		},
		{
			name:    "a list sets a list flag, each item one occurrence",
			file:    "type:\n  - x\n  - y,z\nsetting: [k=v, \"a=1,2\"]\n",
			want:    map[string]string{"type": "[x,y,z]", "setting": `[k=v,"a=1,2"]`},
			wantSrc: map[string]string{"type": "file keel.yaml", "setting": "file keel.yaml"},
		},
		{
			name:    "an empty list empties a list flag",
			file:    "type: []\n",
			want:    map[string]string{"type": "[]"},
			wantSrc: map[string]string{"type": "file keel.yaml"},
		},
		{
			name:    "a list flag from a variable parses as on the command line",
			env:     map[string]string{"KEEL_TYPE": "p,q", "KEEL_SETTING": "k=1,2"},
			want:    map[string]string{"type": "[p,q]", "setting": `["k=1,2"]`},
			wantSrc: map[string]string{"type": "env KEEL_TYPE", "setting": "env KEEL_SETTING"},
		},
		{
			name:    "aliases",
			file:    "data-dir: &d /var/lib/keel\nlisten: *d\n",
			want:    map[string]string{"data-dir": "/var/lib/keel", "listen": "/var/lib/keel"},
			wantSrc: map[string]string{"data-dir": "file keel.yaml", "listen": "file keel.yaml"},
		},
		{
			name: "reserved flags ignore their variables",
			env:  map[string]string{"KEEL_HELP": "true", "KEEL_PRINT_CONFIG": "true", "KEEL_CONFIG": "x.yaml"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := testFlags()
			want := values(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			var file *File
			if tt.file != "" {
				var err error
				if file, err = Parse("keel.yaml", []byte(tt.file)); err != nil {
					t.Fatal(err)
				}
			}
			src, err := Apply("keel test", "", fs, fakeEnv(tt.env), file)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				want[k] = v
			}
			for name, v := range values(fs) {
				if v != want[name] {
					t.Errorf("--%s = %q, want %q", name, v, want[name])
				}
				wantSrc := "default"
				if s, ok := tt.wantSrc[name]; ok {
					wantSrc = s
				}
				if got := src[name].String(); got != wantSrc {
					t.Errorf("--%s from %q, want %q", name, got, wantSrc)
				}
				// A value from anywhere but the default counts as given,
				// for cobra's required-flag checks.
				if changed := fs.Lookup(name).Changed; changed != (wantSrc != "default") {
					t.Errorf("--%s Changed = %v with source %s", name, changed, wantSrc)
				}
			}
			for _, name := range []string{"help", "config", "print-config"} {
				if _, ok := src[name]; ok || fs.Lookup(name).Changed {
					t.Errorf("reserved --%s was set (%v)", name, src[name])
				}
			}
		})
	}
}

func TestApply_Errors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		file string
		want []string // substrings of the one-line error
	}{
		{"unknown key", nil, "data-dri: /x\n", []string{`keel.yaml:1: unknown key "data-dri"`, "keel test has no --data-dri flag", "did you mean data-dir?"}},
		{"unknown key with underscores", nil, "listen: x\nnode_id: 1\n", []string{"keel.yaml:2:", `"node_id"`, "did you mean node-id?"}},
		{"unknown key, nothing close", nil, "broker-id: 1\n", []string{`unknown key "broker-id"`}},
		{"reserved key", nil, "config: other.yaml\n", []string{"keel.yaml:1: config: --config is not a setting"}},
		{"unknown key even when the variable is set", map[string]string{"KEEL_DATA_DIR": "/x"}, "data-dri: /x\n", []string{`unknown key "data-dri"`}},
		{"int", nil, "data-dir: /x\nnode-id: abc\n", []string{"keel.yaml:2:", `"abc"`, "--node-id"}},
		{"int out of range", nil, "node-id: 3000000000\n", []string{"keel.yaml:1:", "--node-id", "out of range"}},
		{"duration without a unit", nil, "raft-heartbeat-timeout: 300\n", []string{"keel.yaml:1:", "--raft-heartbeat-timeout", "missing unit"}},
		{"bool", nil, "tls: maybe\n", []string{"keel.yaml:1:", "--tls"}},
		{"list for a single value", nil, "data-dir: [a, b]\n", []string{"keel.yaml:1: data-dir: a list, but --data-dir takes one value"}},
		{"variable of the wrong type", map[string]string{"KEEL_NODE_ID": "one"}, "", []string{"KEEL_NODE_ID:", `"one"`, "--node-id"}},
		{"variable beats a bad file value", map[string]string{"KEEL_SNAPSHOT_THRESHOLD": "-1"}, "node-id: 1\n", []string{"KEEL_SNAPSHOT_THRESHOLD:", "--snapshot-threshold"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var file *File
			if tt.file != "" {
				var err error
				if file, err = Parse("keel.yaml", []byte(tt.file)); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Apply("keel test", "", testFlags(), fakeEnv(tt.env), file)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		entries int
		wantErr string // substring; empty: no error
	}{
		{"empty", "", 0, ""},
		{"only comments", "# nothing yet\n", 0, ""},
		{"document marker", "---\ndata-dir: /x\n", 1, ""},
		{"top level list", "- data-dir\n", 0, "keel.yaml:1: want a mapping of flag names to values, not a list"},
		{"top level scalar", "data-dir\n", 0, "want a mapping"},
		{"mapping value", "data-dir:\n  path: /x\n", 0, "keel.yaml:1: data-dir: want a value or a list of values, not a mapping"},
		{"null value", "data-dir:\n", 0, `keel.yaml:1: data-dir: no value (write "" for an empty one)`},
		{"null item", "type: [a, ~]\n", 0, "type: want a list of values, but an item is empty"},
		{"mapping item", "type:\n  - a: b\n", 0, "keel.yaml:2: type: want a list of values, but an item is a mapping"},
		{"key twice", "data-dir: /a\nlisten: x\ndata-dir: /b\n", 0, "keel.yaml:3: data-dir given twice (first on line 1)"},
		{"list as key", "[a]: b\n", 0, "want a flag name as the key"},
		{"two documents", "data-dir: /a\n---\ndata-dir: /b\n", 0, "keel.yaml:2: a second YAML document"},
		{"bad YAML", "data-dir: [\n", 0, "keel.yaml: yaml:"},
		{"tab indentation", "type:\n\t- a\n", 0, "keel.yaml: yaml:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("keel.yaml", []byte(tt.file))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatal(err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("no error, want %q", tt.wantErr)
			case err != nil:
				if !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("error %q, want one line holding %q", err, tt.wantErr)
				}
				return
			}
			if len(f.entries) != tt.entries {
				t.Errorf("%d entries, want %d", len(f.entries), tt.entries)
			}
		})
	}
}

func TestLoad_MissingFileNamesIt(t *testing.T) {
	_, err := Load("/nonexistent/keel.yaml")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/keel.yaml") {
		t.Fatalf("err = %v", err)
	}
}

// TestWrite_RoundTrip prints the settings of a flag set whose values came
// from everywhere, feeds the output back as a file to a fresh flag set, and
// wants the same values.
func TestWrite_RoundTrip(t *testing.T) {
	tricky := []struct{ args, file string }{
		{"", ""},
		{"--data-dir=/var/lib/keel --node-id=7 --tls", "listen: \"\"\ntype: []\n"},
		{"--listen=true --output=123", "setting: [\"k=a,b\", \"x=#y\"]\n"},
		{"--data-dir=a:_b_#c --listen=null", "raft-heartbeat-timeout: 1m30s\ntype: [\"x\", \"'\"]\n"},
		{"--data-dir=~ --listen=-", "snapshot-threshold: 18446744073709551615\n"},
	}
	for _, tt := range tricky {
		fs := testFlags()
		if err := fs.Parse(strings.Fields(tt.args)); err != nil {
			t.Fatal(err)
		}
		file, err := Parse("in.yaml", []byte(tt.file))
		if err != nil {
			t.Fatal(err)
		}
		src, err := Apply("keel test", "", fs, fakeEnv(map[string]string{"KEEL_RAFT_HEARTBEAT_TIMEOUT": "250ms"}), file)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := Write(&out, "keel test: settings\n\nsecond line", src, fs); err != nil {
			t.Fatal(err)
		}
		printed := out.String()
		if !strings.HasPrefix(printed, "# keel test: settings\n#\n# second line\n") {
			t.Errorf("header:\n%s", printed)
		}
		for _, reserved := range []string{"help:", "config:", "print-config:"} {
			if strings.Contains("\n"+printed, "\n"+reserved) {
				t.Errorf("prints reserved %s\n%s", reserved, printed)
			}
		}
		back, err := Parse("out.yaml", out.Bytes())
		if err != nil {
			t.Fatalf("printed config does not parse: %v\n%s", err, printed)
		}
		fresh := testFlags()
		if _, err := Apply("keel test", "", fresh, fakeEnv(nil), back); err != nil {
			t.Fatalf("printed config does not apply: %v\n%s", err, printed)
		}
		want, got := values(fs), values(fresh)
		for name := range want {
			if got[name] != want[name] {
				t.Errorf("%q: --%s printed and read back as %q, was %q\n%s", tt.args, name, got[name], want[name], printed)
			}
		}
	}
}

func TestWrite_SaysWhereEachValueCameFrom(t *testing.T) {
	fs := testFlags()
	if err := fs.Parse([]string{"--node-id", "7"}); err != nil {
		t.Fatal(err)
	}
	file, err := Parse("/etc/keel/keel.yaml", []byte("data-dir: /file\ntype: [x]\n"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := Apply("keel test", "", fs, fakeEnv(map[string]string{"KEEL_TLS": "true"}), file)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Write(&out, "", src, fs); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"node-id: 7 # flag\n",
		"tls: true # env KEEL_TLS\n",
		"data-dir: /file # file /etc/keel/keel.yaml\n",
		"type: # file /etc/keel/keel.yaml\n  - x\n",
		"setting: [] # default\n",
		"snapshot-threshold: 8192 # default\n",
		"raft-heartbeat-timeout: 1s # default\n",
		`listen: 127.0.0.1:9091 # default` + "\n",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("no %q in\n%s", line, out.String())
		}
	}
	// Without sources (a command that ran without Apply): changed is "flag".
	out.Reset()
	if err := Write(&out, "", nil, fs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "node-id: 7 # flag\n") {
		t.Errorf("without sources:\n%s", out.String())
	}
}

func TestWrite_LaterSetsDoNotRepeatNames(t *testing.T) {
	local, global := pflag.NewFlagSet("local", pflag.ContinueOnError), pflag.NewFlagSet("global", pflag.ContinueOnError)
	local.String("listen", "a", "")
	global.String("listen", "b", "")
	global.String("log-level", "info", "")
	var out bytes.Buffer
	if err := Write(&out, "", nil, local, global); err != nil {
		t.Fatal(err)
	}
	if want := "listen: a # default\nlog-level: info # default\n"; out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}
