package partlog

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// TestLog_ReadersNeverSeeAPartialBatch: one writer appends (rolling small
// segments, moving the log start, applying retention) while readers fetch
// from the start, from the tail and from the middle. Every read is whole
// batches with good CRCs and contiguous offsets; the only error is a start
// that moved under the reader. Run with -race.
func TestLog_ReadersNeverSeeAPartialBatch(t *testing.T) {
	const appends = 2000
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 8 << 10, IndexIntervalBytes: 512})
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	read := func(next func(prev int64) int64) {
		defer wg.Done()
		var off int64
		for !done.Load() {
			res, err := l.Read(off, 4<<10)
			if errors.Is(err, ErrOffsetOutOfRange) {
				off = res.LogStartOffset
				continue
			}
			if err != nil {
				report(err)
				return
			}
			_, hs, err := splitBatches(res.Records)
			if err != nil {
				report(err)
				return
			}
			for i, h := range hs {
				if i == 0 && (h.BaseOffset > off || h.NextOffset() <= off) {
					report(errors.New("the first batch does not hold the offset read"))
					return
				}
				if i > 0 && h.BaseOffset != hs[i-1].NextOffset() {
					report(errors.New("batches not contiguous"))
					return
				}
				if h.NextOffset() > res.LogEndOffset {
					report(errors.New("a batch past the log end"))
					return
				}
			}
			if len(hs) > 0 {
				off = hs[len(hs)-1].NextOffset()
			}
			off = next(off)
		}
	}
	wg.Add(3)
	go read(func(off int64) int64 { return off })                          // a follower tailing
	go read(func(int64) int64 { return l.LogEndOffset() })                 // at the end
	go read(func(off int64) int64 { return (off + l.LogEndOffset()) / 2 }) // the middle
	for i := 0; i < appends; i++ {
		mustAppend(t, l, spec{records: 1 + i%4, value: 100 + i%300, pid: 1, seq: seqAfter(i)}, int32(i/500))
		if i%400 == 399 {
			if err := l.DeleteTo(l.LogEndOffset() / 2); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Retain(l.cfg.Now(), Retention{Bytes: 64 << 10}); err != nil {
				t.Fatal(err)
			}
		}
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// seqAfter is the base sequence of batch i of the test above: batch j holds
// 1 + j%4 records.
func seqAfter(i int) int32 {
	var s int32
	for j := 0; j < i; j++ {
		s += int32(1 + j%4)
	}
	return s
}
