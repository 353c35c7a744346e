package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

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
	cmd.AddCommand(newMetadataDumpCmd())
	return cmd
}

type dumpOptions struct {
	dataDir   string
	output    string
	fromIndex uint64
	types     []string
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

A corrupt snapshot or an entry that does not decode is reported on stderr, the
dump goes on, and the command exits non-zero at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMetadataDump(cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	cmd.Flags().StringVar(&o.dataDir, "data-dir", "", "the controller's data dir (the controller must be stopped)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text or json (JSON lines)")
	cmd.Flags().Uint64Var(&o.fromIndex, "from-index", 0, "skip entries below this raft index")
	cmd.Flags().StringSliceVar(&o.types, "type", nil, "only these record types (comma-separated)")
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
	failed bool
}

func runMetadataDump(stdout, stderr io.Writer, o *dumpOptions) error {
	d := &dumper{out: bufio.NewWriter(stdout), errOut: stderr}
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
	var body proto.Message = rec
	if of := rec.ProtoReflect().Descriptor().Oneofs().ByName("record"); of != nil {
		if f := rec.ProtoReflect().WhichOneof(of); f != nil && f.Message() != nil {
			body = rec.ProtoReflect().Get(f).Message().Interface()
		}
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(body)
	if err != nil {
		return fmt.Errorf("entry %d: encode %s record: %v", index, typ, err)
	}
	// protojson varies its whitespace on purpose; one line per record wants none.
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return fmt.Errorf("entry %d: encode %s record: %v", index, typ, err)
	}
	return d.line(index, term, source, typ, compact.Bytes())
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
