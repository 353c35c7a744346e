package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/broker/partlog"
)

// `keel partition dump` is Kafka's kafka-dump-log --files for a replica's
// segment files (docs/storage.md): offline, with partlog's own reading
// code, printed in kafka-dump-log's words so that what people grep for
// in its output finds the same lines here.

func newPartitionDumpCmd() *cobra.Command {
	var printRecords bool
	cmd := &cobra.Command{
		Use:   "dump FILE...",
		Short: "Print a replica's segment files: each batch's header, and with --print-records its records (kafka-dump-log)",
		Long: `Print the batches of a replica's segment files (DATA_DIR/logs/TOPICID-PARTITION/
NNN.log on a broker), as kafka-dump-log --files does: each batch's base and
last offset, record count, position, timestamp, size, magic, compression,
CRC and whether it is valid, producer id, epoch and sequences, and the
transactional and control flags. --print-records (kafka-dump-log's
--print-data-log) adds each record's offset, timestamp, key and value,
decompressed.

For an .index file, its entries (offset, position in the .log), each checked
against the .log beside it when there is one.

The files are only read: a running broker's are fine to dump (the end of its
active segment may hold a batch still being written). A batch whose
CRC or header is wrong is printed with isvalid: false; where the file stops
holding whole batches (a torn or damaged tail) the batches before are
printed, then the damage is named with its position. Either exits non-zero.`,
		Example: `  keel partition dump /var/lib/keel/broker/logs/3ZbU…-0/00000000000000000000.log
  keel partition dump --print-records 00000000000000000000.log 00000000000000000000.index`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// A line a record: written through a buffer, flushed before the
			// errors are printed after the lines they follow.
			out := bufio.NewWriterSize(cmd.OutOrStdout(), 256<<10)
			var errs []error
			for i, file := range args {
				if i > 0 {
					fmt.Fprintln(out)
				}
				if err := dumpFile(out, file, printRecords); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", file, err))
				}
			}
			return errors.Join(append(errs, out.Flush())...)
		},
	}
	cmd.Flags().BoolVar(&printRecords, "print-records", false, "also print each record: offset, timestamp, key and value (kafka-dump-log's --print-data-log)")
	return cmd
}

// dumpFile prints one .log or .index file.
func dumpFile(w io.Writer, file string, printRecords bool) error {
	base, suffix, ok := partlog.SegmentBase(filepath.Base(file))
	if !ok {
		return errors.New("not a segment file: want NNNNNNNNNNNNNNNNNNNN.log or .index (20 digits, the base offset)")
	}
	f, size, err := openRegular(file)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(w, "Dumping %s\n", file)
	if suffix == ".index" {
		return dumpIndex(w, f, base, strings.TrimSuffix(file, suffix)+".log")
	}
	fmt.Fprintf(w, "Log starting offset: %d\n", base)
	return dumpSegment(w, f, size, printRecords)
}

// openRegular opens a regular file and returns its size.
func openRegular(file string) (*os.File, int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = errors.New("not a regular file")
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// dumpSegment prints every batch of a .log of size bytes. The first batch
// that is not valid is the error, once every batch is printed.
func dumpSegment(w io.Writer, r io.Reader, size int64, printRecords bool) error {
	var bad error
	invalid := 0
	err := partlog.ReadSegment(r, size, func(b partlog.SegmentBatch) error {
		fmt.Fprintln(w, batchLine(b))
		if b.Err != nil {
			if invalid++; bad == nil {
				bad = fmt.Errorf("the batch at position %d is not valid: %v", b.Position, b.Err)
			}
			return nil
		}
		if !printRecords {
			return nil
		}
		recs, err := b.Records()
		if err != nil {
			return fmt.Errorf("the batch at position %d: %v", b.Position, err)
		}
		for _, r := range recs {
			fmt.Fprintln(w, recordLine(b, r))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if invalid > 1 {
		return fmt.Errorf("%d batches are not valid; the first: %w", invalid, bad)
	}
	return bad
}

// batchLine is a batch as kafka-dump-log prints it, then why it is not
// valid if it is not.
func batchLine(b partlog.SegmentBatch) string {
	h := b.Header
	lastSeq := int32(-1)
	if h.Idempotent() {
		lastSeq = h.LastSequence()
	}
	line := fmt.Sprintf("baseOffset: %d lastOffset: %d count: %d baseSequence: %d lastSequence: %d producerId: %d producerEpoch: %d partitionLeaderEpoch: %d isTransactional: %t isControl: %t position: %d %s: %d size: %d magic: %d compresscodec: %s crc: %d isvalid: %t",
		h.BaseOffset, h.LastOffset(), h.RecordsCount, h.BaseSequence, lastSeq, h.ProducerID, h.ProducerEpoch, h.PartitionLeaderEpoch,
		b.Transactional(), b.Control(), b.Position, timestampType(b), h.MaxTimestamp, h.Size(), b.Magic, b.Codec(), b.CRC, b.Err == nil)
	if b.Err != nil {
		line += " error: " + b.Err.Error()
	}
	return line
}

// recordLine is a record as kafka-dump-log --print-data-log prints it.
func recordLine(b partlog.SegmentBatch, r partlog.Record) string {
	seq := int64(-1)
	if b.Header.Idempotent() {
		seq = int64(b.Header.BaseSequence) + r.Offset - b.Header.BaseOffset
	}
	line := fmt.Sprintf("| offset: %d %s: %d keySize: %d valueSize: %d sequence: %d headerKeys: [%s]",
		r.Offset, timestampType(b), r.Timestamp, nullableLen(r.Key), nullableLen(r.Value), seq, strings.Join(r.HeaderKeys, ","))
	if r.Key != nil {
		line += " key: " + string(r.Key)
	}
	if r.Value != nil {
		line += " payload: " + string(r.Value)
	}
	return line
}

func timestampType(b partlog.SegmentBatch) string {
	if b.LogAppendTime() {
		return "LogAppendTime"
	}
	return "CreateTime"
}

// nullableLen is a key's or value's size as Kafka counts it: -1 for null.
func nullableLen(b []byte) int {
	if b == nil {
		return -1
	}
	return len(b)
}

// dumpIndex prints an .index's entries and checks each against the .log
// beside it, when there is one: an entry must name a batch's position and
// its base offset, as partlog writes them.
func dumpIndex(w io.Writer, r io.Reader, base int64, logFile string) error {
	entries, err := partlog.ReadIndex(r, base)
	for _, e := range entries {
		fmt.Fprintf(w, "offset: %d position: %d\n", e.Offset, e.Position)
	}
	if err != nil {
		return err
	}
	f, size, err := openRegular(logFile)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(w, "(not checked: no %s beside it)\n", filepath.Base(logFile))
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	starts := map[int64]int64{} // position -> base offset
	err = partlog.ReadSegment(f, size, func(b partlog.SegmentBatch) error {
		starts[b.Position] = b.Header.BaseOffset
		return nil
	})
	if err != nil {
		return fmt.Errorf("checking it against %s: %w", logFile, err)
	}
	for i, e := range entries {
		if off, ok := starts[e.Position]; !ok || off != e.Offset {
			return fmt.Errorf("entry %d (offset %d, position %d) does not name a batch of %s", i, e.Offset, e.Position, filepath.Base(logFile))
		}
	}
	fmt.Fprintf(w, "%d entries, each naming a batch of %s\n", len(entries), filepath.Base(logFile))
	return nil
}
