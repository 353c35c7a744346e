// Package config lets a keel command take its flags from two more places
// than the command line: environment variables and a YAML file (--config).
// A flag given on the command line wins over its variable, the variable over
// the file, the file over the flag's default.
//
// The CLI (admin and offline commands) reads KEEL_<FLAG>; a command that runs
// a process reads its own KEEL_<PROCESS>_<FLAG> and none of the CLI's, as
// etcd reads ETCD_* and etcdctl ETCDCTL_*: the admin certificate exported
// for keel commands must not become the certificate of a controller started
// later from the same shell.
//
// It works on a command's pflag.FlagSet as it is, so a flag added to a
// command is configurable with no more code; and it sets every value through
// the flag's own parser, so a value means the same wherever it is written.
// A file is one process's settings, as with Consul or etcd: its keys must be
// flags of the command that reads it, so a typo, or another command's file,
// fails at start instead of being ignored.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// EnvPrefix starts every variable's name: --data-dir is KEEL_DATA_DIR for
// the CLI, KEEL_CONTROLLER_DATA_DIR for keel controller.
const EnvPrefix = "KEEL_"

// reserved flags are actions or the configuration itself, not settings:
// never read from a variable or a file, never printed.
var reserved = map[string]bool{"help": true, "version": true, "config": true, "print-config": true}

// NotASetting is the flag annotation that marks a flag as part of a
// command's action rather than a setting (`partition elect --all`,
// `snapshot restore --force-cluster-id`): a variable left in the environment
// or a line in a file must never choose what a command does.
const NotASetting = "keel/not-a-setting"

// Settable reports whether f is a setting: every flag but --help, --version,
// --config, --print-config and those annotated NotASetting. (`keel topic
// create --config k=v`, a topic setting, is therefore never taken from
// KEEL_CONFIG or a file either.)
func Settable(f *pflag.Flag) bool {
	_, action := f.Annotations[NotASetting]
	return !reserved[f.Name] && !action
}

// EnvName is the variable that sets the flag called name for process, the
// name of a command that runs a process ("controller": KEEL_CONTROLLER_), or
// for the CLI when process is "" (KEEL_): the prefix, then the name
// upper-cased, with '-' as '_'.
func EnvName(process, name string) string {
	return envPrefix(process) + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// envPrefix starts the variables process reads (see EnvName).
func envPrefix(process string) string {
	if process == "" {
		return EnvPrefix
	}
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(process, "-", "_")) + "_"
}

// EnvPattern is how docs and messages name all of process's variables:
// "KEEL_*" for the CLI, "KEEL_CONTROLLER_*" for keel controller.
func EnvPattern(process string) string { return envPrefix(process) + "*" }

// Ignored is a variable of the CLI, set, that a process does not read, and
// the one it reads for the same flag instead.
type Ignored struct {
	Name, Instead string
}

// IgnoredEnv lists, in flag order, the CLI's variables set non-empty in env
// that name a setting of fs, or its config flag, which process (not "")
// reads under its own name instead: a process says so once at start, so
// that a KEEL_TLS_CERT left in the shell is not mistaken for its
// certificate. For the CLI (process "") it lists nothing.
func IgnoredEnv(process string, fs *pflag.FlagSet, env func(string) (string, bool)) []Ignored {
	if process == "" {
		return nil
	}
	var out []Ignored
	fs.VisitAll(func(f *pflag.Flag) {
		if !Settable(f) && f.Name != "config" {
			return
		}
		if v, ok := env(EnvName("", f.Name)); ok && v != "" {
			out = append(out, Ignored{Name: EnvName("", f.Name), Instead: EnvName(process, f.Name)})
		}
	})
	return out
}

// File is a parsed config file: flag names and their values, in file order.
type File struct {
	Path    string
	entries []entry
}

type entry struct {
	key    string
	line   int
	values []string // one for a scalar; a list's items
	list   bool
}

// Load reads and parses the config file at path (see Parse). It fails on
// the read's error (which names the path) and as Parse fails.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse parses a config file's contents; path is only for messages. The file
// is one YAML mapping from flag names to values: a scalar (a string, number
// or boolean, written as it would be after the flag) or, for a flag that
// takes a list, a list of them. An empty file sets nothing. Parse fails,
// naming the path and line, on bad YAML, more than one document, a top level
// that is not a mapping, a key given twice, and a value that is empty (null),
// a mapping, or a list holding anything but values. Whether each key is a
// flag is for Apply to check.
func Parse(path string, data []byte) (*File, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return &File{Path: path}, nil
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); err == nil {
		return nil, fmt.Errorf("%s:%d: a second YAML document: want one mapping of flag names to values", path, more.Line)
	} else if !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	top := deref(&doc)
	if top.Kind == yaml.DocumentNode && len(top.Content) == 1 {
		top = deref(top.Content[0])
	}
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return &File{Path: path}, nil // only comments
	}
	if top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of flag names to values, not %s", path, top.Line, kindName(top))
	}
	f := &File{Path: path}
	seen := make(map[string]int)
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := deref(top.Content[i]), deref(top.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			return nil, fmt.Errorf("%s:%d: want a flag name as the key, not %s", path, k.Line, kindName(k))
		}
		if first, dup := seen[k.Value]; dup {
			return nil, fmt.Errorf("%s:%d: %s given twice (first on line %d)", path, k.Line, k.Value, first)
		}
		seen[k.Value] = k.Line
		e := entry{key: k.Value, line: k.Line}
		switch v.Kind {
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				return nil, fmt.Errorf(`%s:%d: %s: no value (write "" for an empty one)`, path, k.Line, k.Value)
			}
			e.values = []string{v.Value}
		case yaml.SequenceNode:
			e.list, e.values = true, []string{}
			for _, item := range v.Content {
				item = deref(item)
				if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
					return nil, fmt.Errorf("%s:%d: %s: want a list of values, but an item is %s", path, item.Line, k.Value, kindName(item))
				}
				e.values = append(e.values, item.Value)
			}
		default:
			return nil, fmt.Errorf("%s:%d: %s: want a value or a list of values, not %s", path, k.Line, k.Value, kindName(v))
		}
		f.entries = append(f.entries, e)
	}
	return f, nil
}

// deref follows a YAML alias (*name) to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Tag == "!!null":
		return "empty"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

// Kind is the kind of place a flag's effective value came from.
type Kind int

const (
	FromDefault Kind = iota // the flag's default
	FromFlag                // the command line
	FromEnv                 // a KEEL_* variable
	FromFile                // the config file
)

// Source says where a flag's effective value came from.
type Source struct {
	Kind Kind
	Name string // the variable (FromEnv) or the file's path (FromFile)
}

// String is how --print-config shows s: "default", "flag", "env KEEL_X" or
// "file PATH".
func (s Source) String() string {
	switch s.Kind {
	case FromFlag:
		return "flag"
	case FromEnv:
		return "env " + s.Name
	case FromFile:
		return "file " + s.Name
	}
	return "default"
}

// Sources maps each settable flag's name to where its value came from.
type Sources map[string]Source

// Apply sets every settable flag of fs that the command line left alone:
// from its variable (EnvName(process, flag)) when env (os.LookupEnv, or a
// fake) has it non-empty, else from file's key of the same name (file nil:
// no file). process is "" for the CLI, else the name of the command that
// runs a process; command (e.g. "keel controller") is only for messages.
//
// Values go through fs.Set, so they parse exactly as on the command line and
// the flag then counts as given (required-flag checks pass). A file's list
// sets a list flag to its items, each parsed as one occurrence of the flag;
// a list for any other flag is an error. An empty variable counts as unset,
// so `KEEL_X= keel ...` falls back to the file.
//
// Apply fails, before setting anything, on a file key that is not a settable
// flag of fs (a typo, or another command's setting); and on the first value
// that does not parse, naming the variable, or the file, line and key. It
// returns where every settable flag's value came from, and records it on
// each flag too (SourceOf).
func Apply(command, process string, fs *pflag.FlagSet, env func(string) (string, bool), file *File) (Sources, error) {
	byKey := make(map[string]entry)
	if file != nil {
		for _, e := range file.entries {
			switch f := fs.Lookup(e.key); {
			case f == nil:
				return nil, fmt.Errorf("%s:%d: unknown key %q: %s has no --%s flag%s",
					file.Path, e.line, e.key, command, e.key, suggest(fs, e.key))
			case !Settable(f):
				return nil, fmt.Errorf("%s:%d: %s: --%s is not a setting, so not for a file", file.Path, e.line, e.key, e.key)
			}
			byKey[e.key] = e
		}
	}
	src := make(Sources)
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || !Settable(f) {
			return
		}
		if f.Changed {
			src[f.Name] = Source{Kind: FromFlag}
			return
		}
		name := EnvName(process, f.Name)
		if v, ok := env(name); ok && v != "" {
			if err = fs.Set(f.Name, v); err != nil {
				err = fmt.Errorf("%s: %w", name, err)
				return
			}
			src[f.Name] = Source{Kind: FromEnv, Name: name}
			return
		}
		if e, ok := byKey[f.Name]; ok {
			if err = setFromFile(fs, f, e); err != nil {
				err = fmt.Errorf("%s:%d: %w", file.Path, e.line, err)
				return
			}
			src[f.Name] = Source{Kind: FromFile, Name: file.Path}
			return
		}
		src[f.Name] = Source{Kind: FromDefault}
	})
	if err != nil {
		return nil, err
	}
	for name, s := range src {
		_ = fs.SetAnnotation(name, sourceAnnotation, []string{fmt.Sprint(int(s.Kind)), s.Name})
	}
	return src, nil
}

// sourceAnnotation holds, on each flag Apply set or visited, its Source:
// the Kind as a number, and the Name.
const sourceAnnotation = "keel/source"

// SourceOf is where f's value came from, as Apply recorded it on the flag,
// so that code meeting a bad value later (a TLS file that does not load)
// can say where it was given. A flag Apply did not visit is FromFlag if
// the command line changed it, else FromDefault.
func SourceOf(f *pflag.Flag) Source {
	if a := f.Annotations[sourceAnnotation]; len(a) == 2 {
		var k int
		if _, err := fmt.Sscan(a[0], &k); err == nil {
			return Source{Kind: Kind(k), Name: a[1]}
		}
	}
	if f.Changed {
		return Source{Kind: FromFlag}
	}
	return Source{Kind: FromDefault}
}

func setFromFile(fs *pflag.FlagSet, f *pflag.Flag, e entry) error {
	sv, isList := f.Value.(pflag.SliceValue)
	if !e.list {
		return fs.Set(f.Name, e.values[0])
	}
	if !isList {
		return fmt.Errorf("%s: a list, but --%s takes one value", e.key, f.Name)
	}
	if len(e.values) == 0 {
		// Setting nothing through fs.Set would leave the default: empty it.
		if err := sv.Replace(nil); err != nil {
			return fmt.Errorf("%s: %w", e.key, err)
		}
		f.Changed = true
		return nil
	}
	for _, v := range e.values {
		if err := fs.Set(f.Name, v); err != nil {
			return err
		}
	}
	return nil
}

// suggest names the settable flag of fs closest to key, when one is close.
func suggest(fs *pflag.FlagSet, key string) string {
	want := strings.ReplaceAll(strings.ToLower(key), "_", "-")
	best, bestDist := "", 3
	fs.VisitAll(func(f *pflag.Flag) {
		if d := distance(want, f.Name); Settable(f) && d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Write writes the settable flags of sets, in order (a name seen in an
// earlier set is not repeated), as a config file that Parse and Apply read
// back to the same values: each flag with its effective value and a comment
// saying where the value came from (src; a flag missing from src shows
// "flag" when it was changed, else "default"). header, if any, goes first,
// as comment lines. It fails only as w fails.
func Write(w io.Writer, header string, src Sources, sets ...*pflag.FlagSet) error {
	top := &yaml.Node{Kind: yaml.MappingNode}
	seen := make(map[string]bool)
	for _, fs := range sets {
		fs.VisitAll(func(f *pflag.Flag) {
			if !Settable(f) || f.Deprecated != "" || seen[f.Name] {
				return
			}
			seen[f.Name] = true
			s, ok := src[f.Name]
			if !ok && f.Changed {
				s = Source{Kind: FromFlag}
			}
			key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.Name}
			top.Content = append(top.Content, key, valueNode(f, key, s.String()))
		})
	}
	var buf bytes.Buffer
	for line := range strings.Lines(header) {
		buf.WriteString(strings.TrimRight("# "+strings.TrimSuffix(line, "\n"), " ") + "\n")
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if len(top.Content) > 0 {
		if err := enc.Encode(top); err != nil {
			return err // no YAML node built above fails to encode
		}
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// valueNode renders f's value as YAML: a list flag as a list of strings,
// other flags as a scalar tagged by the flag's type, so that a string such as
// "true" or "" stays a quoted string and a number stays a plain number.
// comment goes on the line: after a scalar, or after key of a block list.
func valueNode(f *pflag.Flag, key *yaml.Node, comment string) *yaml.Node {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		items := sv.GetSlice()
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for _, v := range items {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v})
		}
		if len(items) == 0 {
			n.Style, n.LineComment = yaml.FlowStyle, comment // []
		} else {
			key.LineComment = comment
		}
		return n
	}
	tag := "!!str"
	switch t := f.Value.Type(); {
	case t == "bool":
		tag = "!!bool"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		tag = "!!int"
	case strings.HasPrefix(t, "float"):
		tag = "!!float"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: f.Value.String(), LineComment: comment}
}
