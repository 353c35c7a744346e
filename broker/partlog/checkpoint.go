package partlog

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/keel-dev/keel/internal/atomicfile"
)

// Checkpoint files are Kafka's text format: a version line (0), a count
// line, then one entry a line, fields separated by a space. They are
// written whole (temp file, fsync, rename, fsync of the directory), so a
// crash leaves the old one or the new one.
const checkpointVersion = 0

// readCheckpoint reads a checkpoint whose entries have width fields each.
// A missing file is (nil, false, nil); a damaged one an error naming it.
func readCheckpoint(path string, width int) ([][]int64, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("partlog: %s: %w", path, atomicfile.PathCause(err))
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("partlog: %s: damaged checkpoint: %s", path, fmt.Sprintf(format, a...))
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return nil, false, bad("does not end with a newline")
	}
	lines := strings.Split(string(b[:len(b)-1]), "\n")
	if len(lines) < 2 {
		return nil, false, bad("%d lines, want a version and a count", len(lines))
	}
	if v, err := strconv.Atoi(lines[0]); err != nil || v != checkpointVersion {
		return nil, false, bad("version %q, want %d", lines[0], checkpointVersion)
	}
	n, err := strconv.Atoi(lines[1])
	if err != nil || n != len(lines)-2 {
		return nil, false, bad("count %q, but %d entries follow", lines[1], len(lines)-2)
	}
	entries := make([][]int64, 0, n)
	for i, line := range lines[2:] {
		fields := strings.Split(line, " ")
		if len(fields) != width {
			return nil, false, bad("entry %d is %q, want %d fields", i, line, width)
		}
		e := make([]int64, width)
		for j, f := range fields {
			if e[j], err = strconv.ParseInt(f, 10, 64); err != nil {
				return nil, false, bad("entry %d is %q", i, line)
			}
		}
		entries = append(entries, e)
	}
	return entries, true, nil
}

func writeCheckpoint(path string, entries [][]int64) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d\n%d\n", checkpointVersion, len(entries))
	for _, e := range entries {
		for j, v := range e {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatInt(v, 10))
		}
		b.WriteByte('\n')
	}
	if err := atomicfile.WriteMode(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("partlog: %s: %w", path, atomicfile.PathCause(err))
	}
	return nil
}

// readOffsetCheckpoint reads a checkpoint of one offset.
func readOffsetCheckpoint(path string) (int64, bool, error) {
	es, ok, err := readCheckpoint(path, 1)
	if err != nil || !ok {
		return 0, false, err
	}
	if len(es) != 1 || es[0][0] < 0 {
		return 0, false, fmt.Errorf("partlog: %s: damaged checkpoint: want one offset, not negative", path)
	}
	return es[0][0], true, nil
}

func writeOffsetCheckpoint(path string, offset int64) error {
	return writeCheckpoint(path, [][]int64{{offset}})
}
