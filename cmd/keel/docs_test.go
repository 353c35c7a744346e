package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/keel-dev/keel/cmd/keel/internal/config"
)

// configurationDoc is the committed page that `make docs` writes.
const configurationDoc = "../../docs/configuration.md"

func generateConfigurationDoc(t *testing.T) string {
	t.Helper()
	var out bytes.Buffer
	if err := writeConfigurationDoc(&out, newDocsRoot()); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// TestDocs_ConfigurationUpToDate fails when docs/configuration.md is not
// what `keel docs configuration` prints now: a flag, a default or a help
// text changed without `make docs`.
func TestDocs_ConfigurationUpToDate(t *testing.T) {
	committed, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatalf("%v: run make docs", err)
	}
	want := generateConfigurationDoc(t)
	if string(committed) == want {
		return
	}
	got, gen := strings.Split(string(committed), "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(got), len(gen)); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(gen) {
			w = gen[i]
		}
		if g != w {
			t.Fatalf("docs/configuration.md is stale: run make docs\nfirst difference, line %d:\ncommitted: %q\ngenerated: %q", i+1, g, w)
		}
	}
}

// TestDocs_ConfigurationIsStable generates the page twice, the second time
// with another temporary, home and working directory and another
// GOMAXPROCS, and wants the same bytes: no default may carry the machine.
func TestDocs_ConfigurationIsStable(t *testing.T) {
	first := generateConfigurationDoc(t)

	other := t.TempDir()
	t.Setenv("TMPDIR", filepath.Join(other, "tmp"))
	t.Setenv("HOME", filepath.Join(other, "home"))
	t.Setenv("KEEL_CONFIG", filepath.Join(other, "missing.yaml"))
	t.Setenv("KEEL_CONTROLLERS", "10.9.9.9:1")
	t.Chdir(other)
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)

	if second := generateConfigurationDoc(t); second != first {
		t.Fatalf("the page depends on the environment:\n--- first\n%s\n--- second\n%s", first, second)
	}
}

// TestDocs_ConfigurationCommand runs the hidden command as a user would,
// with a KEEL_CONFIG that names no file (the root's config loading must
// not run for it), and checks that it is hidden from the help.
func TestDocs_ConfigurationCommand(t *testing.T) {
	t.Setenv("KEEL_CONFIG", filepath.Join(t.TempDir(), "missing.yaml"))
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"docs", "configuration"})
	if err := root.Execute(); err != nil {
		t.Fatalf("keel docs configuration: %v", err)
	}
	if out.String() != generateConfigurationDoc(t) {
		t.Error("keel docs configuration prints something else than writeConfigurationDoc")
	}

	root = newRootCmd()
	var help bytes.Buffer
	root.SetOut(&help)
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(help.String(), "docs") {
		t.Errorf("keel --help lists the hidden docs command:\n%s", help.String())
	}
}

// TestDocs_ConfigurationHasEveryFlag wants a section for every runnable
// command and an item for each of its flags with the flag's default: in the
// section, or among the common flags when the section names it there. It
// also checks the rule the page states for which flags are settings.
func TestDocs_ConfigurationHasEveryFlag(t *testing.T) {
	doc := generateConfigurationDoc(t)
	root := newDocsRoot()
	cmds := docCommands(root)
	if len(cmds) < 20 {
		t.Fatalf("only %d commands found", len(cmds))
	}
	common := docSection(t, doc, "\n## Common flags\n", "\n## ")
	for _, c := range cmds {
		section := docSection(t, doc, "\n### `"+c.CommandPath()+"`\n", "\n### ")
		markActions(c) // as at run time: which flags are settings
		process := c.Flags().Lookup(flagPrintConfig) != nil
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" || f.Hidden { // hidden flags are left out, as the generator does
				return
			}
			item := flagItem(section, f.Name)
			if item == "" {
				line, _, _ := strings.Cut(section, "\n\n")
				if !strings.Contains(line, "Common flags:") || !strings.Contains(line, "`--"+f.Name+"`") {
					t.Errorf("%s: no item for --%s, and the section does not name it as a common flag", c.CommandPath(), f.Name)
					return
				}
				item = flagItem(common, f.Name)
			}
			want := "` = " + defaultText(f) + ": "
			if defaultText(f) == "" {
				want = "`: "
			}
			if !strings.Contains(item, want) {
				t.Errorf("%s --%s: default %q not in %q", c.CommandPath(), f.Name, f.DefValue, item)
			}
			if configurable(c) && f.Name != flagPrintConfig && config.Settable(f) != (process || connectionFlags[f.Name]) {
				t.Errorf("%s --%s: config.Settable says %v, against the rule the page states", c.CommandPath(), f.Name, config.Settable(f))
			}
		})
	}
	for _, name := range []string{"config", "print-config", "help", "version"} {
		if config.Settable(&pflag.Flag{Name: name}) {
			t.Errorf("the page says --%s is never a setting, but config.Settable says it is", name)
		}
	}
	if strings.Contains(doc, "### `keel docs") {
		t.Error("the hidden docs command has a section")
	}
}

// docSection is the text of doc after head, up to the next end (or the
// end of doc).
func docSection(t *testing.T, doc, head, end string) string {
	t.Helper()
	start := strings.Index(doc, head)
	if start < 0 {
		t.Fatalf("no section %q", strings.TrimSpace(head))
	}
	section := doc[start+len(head):]
	if i := strings.Index(section, end); i >= 0 {
		section = section[:i]
	}
	return section
}

// flagItem is the list item of --name in section, or "".
func flagItem(section, name string) string {
	for line := range strings.Lines(section) {
		flag, _, _ := strings.Cut(strings.TrimPrefix(line, "- `"), "`")
		if strings.HasPrefix(line, "- `") && (strings.HasSuffix(flag, "--"+name) || strings.Contains(flag, "--"+name+" ")) {
			return line
		}
	}
	return ""
}

func TestStableDefault(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	home := filepath.Join(tmp, "home")
	t.Setenv("HOME", home)
	host, _ := os.Hostname()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"10s", "10s"},
		{"127.0.0.1:9091,127.0.0.1:9092", "127.0.0.1:9091,127.0.0.1:9092"},
		{tmp, "$TMPDIR"},
		{filepath.Join(tmp, "keel"), "$TMPDIR/keel"},
		{filepath.Join(home, ".keel"), "$HOME/.keel"},
		{tmp + "x", tmp + "x"}, // a sibling, not under it
	} {
		if got := stableDefault(tc.in); got != tc.want {
			t.Errorf("stableDefault(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if host != "" && host != "localhost" {
		if got := stableDefault(host + ":9091"); got != "$HOSTNAME:9091" {
			t.Errorf("stableDefault(%q) = %q", host+":9091", got)
		}
	}
}
