package partlog

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// benchBatch is a batch of 16 records of 1 KiB, as a producer with
// linger would send (about 16.5 KiB).
func benchBatch(b *testing.B) []byte {
	return makeBatch(b, spec{records: 16, value: 1024})
}

// BenchmarkAppend: leader appends of 16 x 1 KiB-record batches, to the page
// cache (no fsync: the default policy), rolling 256 MiB segments.
func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  Config
		s    spec
	}{
		{"16x1KiB", Config{SegmentBytes: 256 << 20}, spec{records: 16, value: 1024}},
		{"1x1KiB", Config{SegmentBytes: 256 << 20}, spec{records: 1, value: 1024}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			batch := makeBatch(b, bc.s)
			l, err := Open(b.TempDir(), bc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			b.SetBytes(int64(len(batch)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := l.Append(batch, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRead: a follower reading the log from start to end, 1 MiB a
// fetch, from the page cache.
func BenchmarkRead(b *testing.B) {
	l, err := Open(b.TempDir(), Config{SegmentBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	batch := benchBatch(b)
	for l.Size() < 128<<20 {
		if _, err := l.Append(batch, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(1 << 20)
	b.ResetTimer()
	var off int64
	for i := 0; i < b.N; i++ {
		if off >= l.LogEndOffset() {
			off = 0
		}
		res, err := l.Read(off, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		_, hs, err := splitBatches(res.Records)
		if err != nil || len(hs) == 0 {
			b.Fatal(err)
		}
		off = hs[len(hs)-1].NextOffset()
	}
}

var recoveryLog struct {
	once sync.Once
	dir  string
	err  error
}

// recoveryDir writes a 256 MiB log once per test binary, in 64 MiB
// segments; TestMain removes it.
func recoveryDir(b *testing.B) string {
	recoveryLog.once.Do(func() {
		recoveryLog.dir, recoveryLog.err = os.MkdirTemp("", "partlog-bench-")
		if recoveryLog.err != nil {
			return
		}
		l, err := Open(recoveryLog.dir, Config{SegmentBytes: 64 << 20})
		if err != nil {
			recoveryLog.err = err
			return
		}
		batch := benchBatch(b)
		for l.Size() < 256<<20 && err == nil {
			_, err = l.Append(batch, 0)
		}
		recoveryLog.err = errorsJoin(err, l.Close())
	})
	if recoveryLog.err != nil {
		b.Fatal(recoveryLog.err)
	}
	return recoveryLog.dir
}

// BenchmarkRecovery: opening a 256 MiB log (four 64 MiB segments) after an
// unclean stop with no recovery point (every batch's CRC checked, every
// index rebuilt: the worst case), and after a clean one (headers of the
// sealed segments, CRCs of the active one).
func BenchmarkRecovery(b *testing.B) {
	for _, bc := range []struct {
		name    string
		unclean bool
	}{{"unclean-256MiB", true}, {"clean-256MiB", false}} {
		b.Run(bc.name, func(b *testing.B) {
			dir := recoveryDir(b)
			b.SetBytes(256 << 20)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if bc.unclean {
					if err := os.Remove(filepath.Join(dir, recoveryCheckpointFile)); err != nil && !os.IsNotExist(err) {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				l, err := Open(dir, Config{SegmentBytes: 64 << 20})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := l.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if recoveryLog.dir != "" {
		_ = os.RemoveAll(recoveryLog.dir)
	}
	os.Exit(code)
}

// BenchmarkValidPrefix is the CRC-32C check of a 1 MiB fetch answer of
// 16 KiB batches: what a leader spends on each consumer fetch, and a
// follower on each fetch answer.
func BenchmarkValidPrefix(b *testing.B) {
	one := makeBatch(b, spec{records: 16, value: 1000})
	var records []byte
	for len(records) < 1<<20 {
		records = append(records, one...)
	}
	b.SetBytes(int64(len(records)))
	for b.Loop() {
		if n, err := ValidPrefix(records); err != nil || n != len(records) {
			b.Fatal(n, err)
		}
	}
}
