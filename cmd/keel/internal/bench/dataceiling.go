package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keel-dev/keel/broker/batchcheck"
	"github.com/keel-dev/keel/broker/partlog"
)

// The data path's ceilings on one machine, measured in the same run as the
// produce scenario: how fast one partition's log appends in one process,
// and how fast one TCP stream goes between two processes on loopback.
// With RF 3 on one machine every byte produced is appended three times (the
// leader's and two followers' logs) and crosses loopback three times (the
// producer to the leader, the leader to each follower), so the cluster
// cannot go faster than a third of the lower of the two.

// appendBatchRecords is how many records each batch of the append
// measurement holds: about what a producer with a backlog sends to one
// partition (the Go benchmark BenchmarkAppend/16x1KiB is the same shape).
const appendBatchRecords = 16

// SinkCommand is the hidden keel subcommand that ServeSink runs in: the
// other end of the loopback measurement.
const SinkCommand = "bench-sink"

// DataCeiling is the data path's ceiling on one machine, in bytes per
// second.
type DataCeiling struct {
	AppendBytesPerS   float64
	LoopbackBytesPerS float64
}

// RF3 is the fastest an RF-3 cluster on one machine could take records:
// the lower of a third of the append rate and a third of the loopback
// bandwidth; 0 if either is unknown.
func (c DataCeiling) RF3() float64 {
	if c.AppendBytesPerS <= 0 || c.LoopbackBytesPerS <= 0 {
		return 0
	}
	return min(c.AppendBytesPerS, c.LoopbackBytesPerS) / 3
}

// Ratio is bytesPerS against the RF-3 ceiling; 0 when there is none.
func (c DataCeiling) Ratio(bytesPerS float64) float64 {
	ceil := c.RF3()
	if ceil <= 0 {
		return 0
	}
	return bytesPerS / ceil
}

// recordBatch returns one v2 record batch (uncompressed, not idempotent)
// of n records whose values are value, as a producer sends it
// (batchcheck.Build), a millisecond apart.
func recordBatch(n int, value []byte) []byte {
	recs := make([]kmsg.Record, n)
	for i := range recs {
		recs[i] = kmsg.Record{TimestampDelta64: int64(i), Value: value}
	}
	return batchcheck.Build(time.Now().UnixMilli(), recs)
}

// MeasureAppend is one partition log's append rate in this process, in
// bytes of record values per second (as the produce figures count them):
// partlog with the broker's defaults (1 GiB segments, no
// fsync: the broker's default flush policy), batches of 16 records of
// recordSize random bytes, appended for d after a warm-up of a tenth of it,
// at most maxBytes in all.
func MeasureAppend(ctx context.Context, dir string, recordSize int, d time.Duration, maxBytes int64) (float64, error) {
	value := make([]byte, recordSize)
	_, _ = rand.Read(value)
	batch := recordBatch(appendBatchRecords, value)
	l, err := partlog.Open(dir, partlog.Config{})
	if err != nil {
		return 0, err
	}
	defer func() {
		l.Close()
		os.RemoveAll(dir)
	}()
	values := int64(appendBatchRecords * recordSize)
	appendFor := func(d time.Duration, limit int64) (int64, time.Duration, error) {
		var n int64
		start := time.Now()
		for time.Since(start) < d && n+values <= limit {
			if _, err := l.Append(batch, 0); err != nil {
				return n, 0, err
			}
			n += values
			if ctx.Err() != nil {
				return n, 0, ctx.Err()
			}
		}
		return n, time.Since(start), nil
	}
	if _, _, err := appendFor(d/10, maxBytes/10); err != nil {
		return 0, err
	}
	n, took, err := appendFor(d, maxBytes)
	if err != nil {
		return 0, err
	}
	if n == 0 || took <= 0 {
		return 0, errors.New("the append measurement appended nothing")
	}
	return float64(n) / took.Seconds(), nil
}

// MeasureLoopback is the bandwidth of one TCP stream on loopback from this
// process to a child process (`exe bench-sink`, env added to its
// environment), in bytes per second: 1 MiB writes for d, then the time
// until the child has counted every byte.
func MeasureLoopback(ctx context.Context, exe string, env []string, d time.Duration) (float64, error) {
	cmd := exec.CommandContext(ctx, exe, SinkCommand)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s %s: %w", exe, SinkCommand, err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("%s %s did not say where it listens: %w", exe, SinkCommand, err)
	}
	addr := strings.TrimSpace(line)
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	buf := make([]byte, 1<<20)
	_, _ = rand.Read(buf)
	var sent int64
	start := time.Now()
	for time.Since(start) < d {
		n, err := conn.Write(buf)
		sent += int64(n)
		if err != nil {
			return 0, fmt.Errorf("write to the sink: %w", err)
		}
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, err
	}
	var got [8]byte
	if _, err := io.ReadFull(conn, got[:]); err != nil {
		return 0, fmt.Errorf("read the sink's count: %w", err)
	}
	took := time.Since(start)
	if n := int64(binary.BigEndian.Uint64(got[:])); n != sent {
		return 0, fmt.Errorf("the sink counted %d bytes, %d were sent", n, sent)
	}
	return float64(sent) / took.Seconds(), nil
}

// ServeSink is the child's side of MeasureLoopback: it listens on a
// loopback port, writes the address and a newline to out, takes one
// connection, reads it to its end, answers with the count of bytes read
// (8 bytes, big-endian) and returns. It gives up after a minute without a
// connection.
func ServeSink(out io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	if _, err := fmt.Fprintln(out, ln.Addr().String()); err != nil {
		return err
	}
	if err := ln.(*net.TCPListener).SetDeadline(time.Now().Add(time.Minute)); err != nil {
		return err
	}
	conn, err := ln.Accept()
	if err != nil {
		return err
	}
	defer conn.Close()
	// Reads of 1 MiB, not io.Discard's 8 KiB: the syscalls of small reads
	// would be measured instead of the loopback.
	buf := make([]byte, 1<<20)
	var n int64
	for {
		m, err := conn.Read(buf)
		n += int64(m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	_, err = conn.Write(b[:])
	return err
}
