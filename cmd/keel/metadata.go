package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
)

// Raft's own entries carry no records; dump names them by their raft type.
var raftEntryTypes = map[raft.LogType]string{
	raft.LogConfiguration: "raft_configuration",
	raft.LogNoop:          "raft_noop",
	raft.LogBarrier:       "raft_barrier",
}

func newMetadataCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "metadata",
		Short: "Offline tools for a controller's metadata log",
	}
	cmd.AddCommand(newMetadataDumpCmd(), newMetadataShellCmd())
	return cmd
}

type dumpOptions struct {
	dataDir   string
	output    string
	fromIndex uint64
	types     []string
	topic     string
}

func newMetadataDumpCmd() *cobra.Command {
	o := &dumpOptions{}
	cmd := &cobra.Command{
		Use:   "dump --data-dir DIR",
		Short: "Print every metadata record in a stopped controller's snapshot and log, in order",
		Long: `Print every metadata record in a stopped controller's data dir: the latest
snapshot's records (source "snapshot", with the snapshot's raft index and
term), then every log entry after the snapshot, one line per record. Raft's
own entries are shown as raft_configuration, raft_noop or raft_barrier.

--from-index N skips log entries below N. The snapshot is printed only if N is
at or below its index: it stands for every entry up to that index, which the
log may no longer hold.

Each record is one line of JSON: every field with its proto name, zero values
included, numbers as numbers, topic ids as the UUID text other commands print.
--topic keeps only the records about one topic.

A corrupt snapshot or an entry that does not decode is reported on stderr, the
dump goes on, and the command exits non-zero at the end.`,
		Example: `  keel metadata dump --data-dir /var/lib/keel/controller
  keel metadata dump --data-dir /var/lib/keel/controller --topic orders -o json
  keel metadata dump --data-dir /var/lib/keel/controller --type broker_registration,fence_broker`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMetadataDump(cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	cmd.Flags().StringVar(&o.dataDir, "data-dir", "", "the controller's data dir (the controller must be stopped)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text or json (JSON lines)")
	cmd.Flags().Uint64Var(&o.fromIndex, "from-index", 0, "skip entries below this raft index")
	cmd.Flags().StringSliceVar(&o.types, "type", nil, "only these record types (comma-separated)")
	cmd.Flags().StringVar(&o.topic, "topic", "", "only the records about this topic (a name or an id)")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

// recordTypeNames lists every type name --type accepts: the record types as
// fsm.RecordType names them, then raft's own entry types.
func recordTypeNames() []string {
	var names []string
	fields := (&keelpb.Record{}).ProtoReflect().Descriptor().Oneofs().ByName("record").Fields()
	for i := range fields.Len() {
		names = append(names, string(fields.Get(i).Name()))
	}
	slices.Sort(names)
	for _, t := range []raft.LogType{raft.LogConfiguration, raft.LogNoop, raft.LogBarrier} {
		names = append(names, raftEntryTypes[t])
	}
	return names
}

// dumpLine is one line of `-o json`.
type dumpLine struct {
	Index  uint64          `json:"index"`
	Term   uint64          `json:"term"`
	Source string          `json:"source"`
	Type   string          `json:"type"`
	Record json.RawMessage `json:"record,omitempty"`
}

// errDumpIncomplete ends a dump that reported errors on stderr as it went.
var errDumpIncomplete = errors.New("the dump is incomplete: see the errors above")

type dumper struct {
	out    *bufio.Writer
	errOut io.Writer
	json   bool
	types  map[string]bool // nil: every type
	// topic, when set, keeps only the records about the topic of that
	// name (or id), whose ids are in topicIDs.
	topic    string
	topicIDs map[string]bool
	failed   bool
}

func runMetadataDump(stdout, stderr io.Writer, o *dumpOptions) error {
	d := &dumper{out: bufio.NewWriter(stdout), errOut: stderr, topic: o.topic, topicIDs: map[string]bool{}}
	// A topic's id (the UUID text other commands print) stands for it too:
	// a deleted topic's name may since belong to another.
	if id, err := uuid.Parse(o.topic); err == nil && len(o.topic) == 36 {
		d.topicIDs[string(id[:])] = true
	}
	switch strings.ToLower(o.output) {
	case "text", "table":
	case "json":
		d.json = true
	default:
		return fmt.Errorf("-o %q: want text or json", o.output)
	}
	if len(o.types) > 0 {
		valid := recordTypeNames()
		d.types = map[string]bool{}
		for _, t := range o.types {
			t = strings.TrimSpace(t)
			if !slices.Contains(valid, t) {
				return fmt.Errorf("--type %q is not a record type; valid types: %s", t, strings.Join(valid, ", "))
			}
			d.types[t] = true
		}
	}

	r, err := raftlog.OpenReadOnly(o.dataDir)
	if err != nil {
		return err
	}
	defer r.Close()

	// Log entries at or below the snapshot's index are already in it.
	var after uint64
	meta, rc, err := r.LatestSnapshot()
	switch {
	case err != nil:
		d.reportf("snapshot: %v", err)
	case meta != nil:
		after = meta.Index
		if o.fromIndex <= meta.Index {
			_, err := fsm.ScanSnapshot(rc, func(rec *keelpb.Record) error {
				return d.record(meta.Index, meta.Term, "snapshot", rec)
			})
			if err != nil {
				d.reportf("snapshot %s (index %d, term %d): %v", meta.ID, meta.Index, meta.Term, err)
			}
		}
		_ = rc.Close()
	}

	err = r.Entries(max(after+1, o.fromIndex), func(index, term uint64, typ raft.LogType, data []byte) error {
		if typ != raft.LogCommand {
			name, ok := raftEntryTypes[typ]
			if !ok {
				name = "raft_" + strings.ToLower(strings.TrimPrefix(typ.String(), "Log"))
			}
			return d.line(index, term, "log", name, nil)
		}
		batch, err := fsm.DecodeBatch(data)
		if err != nil {
			d.reportf("log entry %d (term %d): %v", index, term, err)
			return nil
		}
		for _, rec := range batch.GetRecords() {
			if err := d.record(index, term, "log", rec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		d.reportf("%v", err)
	}
	if err := d.out.Flush(); err != nil {
		return err
	}
	if d.failed {
		return errDumpIncomplete
	}
	return nil
}

// reportf writes one error line to stderr, flushing stdout first so the two
// interleave in order on a terminal, and marks the dump as failed.
func (d *dumper) reportf(format string, args ...any) {
	_ = d.out.Flush()
	fmt.Fprintf(d.errOut, "error: "+format+"\n", args...)
	d.failed = true
}

func (d *dumper) record(index, term uint64, source string, rec *keelpb.Record) error {
	typ := fsm.RecordType(rec)
	if d.types != nil && !d.types[typ] {
		return nil
	}
	body := recordBody(rec)
	if d.topic != "" && !d.aboutTopic(body) {
		return nil
	}
	return d.line(index, term, source, typ, appendMessageJSON(nil, body))
}

// recordBody is the message a record holds (its oneof's), or the record
// itself when it holds none.
func recordBody(rec *keelpb.Record) protoreflect.Message {
	m := rec.ProtoReflect()
	if of := m.Descriptor().Oneofs().ByName("record"); of != nil {
		if f := m.WhichOneof(of); f != nil && f.Message() != nil {
			return m.Get(f).Message()
		}
	}
	return m
}

// aboutTopic reports whether body concerns --topic: the TopicRecord that
// names it, whose id it then remembers (the snapshot and the log come in
// order, so a topic's creation precedes the records that refer to its id),
// or a record whose topic_id is one of the ids the name has had.
func (d *dumper) aboutTopic(body protoreflect.Message) bool {
	if t, ok := body.Interface().(*keelpb.TopicRecord); ok && t.GetName() == d.topic {
		d.topicIDs[string(t.GetTopicId())] = true
		return true
	}
	fd := body.Descriptor().Fields().ByName("topic_id")
	return fd != nil && isTopicIDField(fd) && d.topicIDs[string(body.Get(fd).Bytes())]
}

func (d *dumper) line(index, term uint64, source, typ string, record []byte) error {
	if d.types != nil && !d.types[typ] {
		return nil
	}
	if d.json {
		b, err := json.Marshal(dumpLine{Index: index, Term: term, Source: source, Type: typ, Record: record})
		if err != nil {
			return err
		}
		d.out.Write(b)
		return d.out.WriteByte('\n')
	}
	if record == nil {
		record = []byte("{}")
	}
	// Snapshot lines need no marker: they alone carry the snapshot's index,
	// as the log is printed only after it.
	_, err := fmt.Fprintf(d.out, "%d %d %s %s\n", index, term, typ, record)
	return err
}
