package partlog

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// DropUnsynced is for tests that emulate a power loss: it cuts the log in
// dir, whose process died without closing it (kill -9), back to the worst
// that a power loss or a kernel crash may leave of it: nothing written
// after the last fsync the log recorded. That fsync is the recovery point
// (recovery-point-offset-checkpoint, written right after every fsync of a
// segment: a roll, Flush, MaybeFlush, Close); the segment holding it is cut
// at the first batch at or after it, and the segments after it are
// removed. A log that never fsynced a segment (no checkpoint) loses every
// batch. The checkpoints stay as they are: each is fsynced as it is
// written, the leader epochs' included. The recovery point may lag the
// last fsync (a process that dies between the fsync and the checkpoint),
// never lead it, so the cut takes at least what a power loss may take.
//
// It returns the log end offset before the cut and after it (the offset
// after the last whole batch), and fails, changing nothing, when dir holds
// no segment or a damaged checkpoint. It must not be called on a log that
// is open.
func DropUnsynced(dir string) (before, after int64, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("partlog: %w", err)
	}
	var bases []int64
	for _, e := range entries {
		if base, ok := parseSegmentName(e.Name(), logSuffix); ok {
			bases = append(bases, base)
		}
	}
	if len(bases) == 0 {
		return 0, 0, fmt.Errorf("partlog: %s: no segment", dir)
	}
	slices.Sort(bases)
	rp, ok, err := readOffsetCheckpoint(filepath.Join(dir, recoveryCheckpointFile))
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		rp = bases[0]
	}
	before, _, err = segmentEnd(filepath.Join(dir, segmentName(bases[len(bases)-1], logSuffix)), bases[len(bases)-1], -1)
	if err != nil {
		return 0, 0, err
	}
	// The segment holding the recovery point, as Open finds it.
	hold := max(sort.Search(len(bases), func(i int) bool { return bases[i] > rp })-1, 0)
	for _, base := range bases[hold+1:] {
		for _, suffix := range []string{logSuffix, indexSuffix} {
			if err := os.Remove(filepath.Join(dir, segmentName(base, suffix))); err != nil && !os.IsNotExist(err) {
				return 0, 0, fmt.Errorf("partlog: %w", err)
			}
		}
	}
	path := filepath.Join(dir, segmentName(bases[hold], logSuffix))
	after, pos, err := segmentEnd(path, bases[hold], rp)
	if err != nil {
		return 0, 0, err
	}
	if err := os.Truncate(path, pos); err != nil {
		return 0, 0, fmt.Errorf("partlog: %w", err)
	}
	return before, after, nil
}

// segmentEnd walks the batch headers of the segment file at path (base
// offset base) up to the first batch at or after offset upTo (-1: to the
// end), or a batch that is not whole: it returns the offset after the last
// batch walked, and its end's position in the file.
func segmentEnd(path string, base, upTo int64) (next, pos int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("partlog: %w", err)
	}
	next = base
	for pos+batchHeaderSize <= int64(len(b)) {
		h := parseHeader(b[pos:])
		if h.Length < minBatchLength || pos+h.Size() > int64(len(b)) || (upTo >= 0 && h.BaseOffset >= upTo) {
			break
		}
		next = h.NextOffset()
		pos += h.Size()
	}
	return next, pos, nil
}
