package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keel-dev/keel/broker/partlog"
)

func TestDataCeiling_RF3AndRatio(t *testing.T) {
	for _, tc := range []struct {
		name             string
		append, loopback float64
		throughput       float64
		wantCeiling      float64
		wantRatio        float64
	}{
		{"the log is the limit", 300e6, 1500e6, 50e6, 100e6, 0.5},
		{"loopback is the limit", 900e6, 600e6, 150e6, 200e6, 0.75},
		{"equal limits", 300e6, 300e6, 100e6, 100e6, 1},
		{"no append rate: no ceiling", 0, 600e6, 50e6, 0, 0},
		{"no loopback: no ceiling", 300e6, 0, 50e6, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DataCeiling{AppendBytesPerS: tc.append, LoopbackBytesPerS: tc.loopback}
			if got := c.RF3(); math.Abs(got-tc.wantCeiling) > 1e-6 {
				t.Errorf("RF3() = %v, want %v", got, tc.wantCeiling)
			}
			if got := c.Ratio(tc.throughput); math.Abs(got-tc.wantRatio) > 1e-9 {
				t.Errorf("Ratio(%v) = %v, want %v", tc.throughput, got, tc.wantRatio)
			}
		})
	}
}

// The append measurement's batches must be what a producer sends: a log
// takes them as a leader's appends, with every record.
func TestRecordBatch_TheLogTakesIt(t *testing.T) {
	l, err := partlog.Open(t.TempDir(), partlog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	batch := recordBatch(appendBatchRecords, bytes.Repeat([]byte("v"), 1024))
	for i := range 3 {
		info, err := l.Append(batch, 0)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if want := int64(i * appendBatchRecords); info.FirstOffset != want || info.LastOffset != want+appendBatchRecords-1 {
			t.Fatalf("append %d: offsets %d-%d, want %d-%d", i, info.FirstOffset, info.LastOffset, want, want+appendBatchRecords-1)
		}
	}
	if got := l.LogEndOffset(); got != 3*appendBatchRecords {
		t.Fatalf("log end offset %d, want %d", got, 3*appendBatchRecords)
	}
}

func TestMeasureAppend(t *testing.T) {
	rate, err := MeasureAppend(context.Background(), t.TempDir()+"/log", 1024, 50*time.Millisecond, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if rate <= 0 {
		t.Fatalf("append rate %v", rate)
	}
}

// ServeSink counts what one connection sends and answers with the count.
func TestServeSink_CountsTheStream(t *testing.T) {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- ServeSink(pw)
		pw.Close()
	}()
	addr := make([]byte, 64)
	n, err := pr.Read(addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	conn, err := net.Dial("tcp", strings.TrimSpace(string(addr[:n])))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const sent = 3<<20 + 5
	if _, err := conn.Write(make([]byte, sent)); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	var got [8]byte
	if _, err := io.ReadFull(conn, got[:]); err != nil {
		t.Fatal(err)
	}
	if n := binary.BigEndian.Uint64(got[:]); n != sent {
		t.Fatalf("the sink counted %d bytes, want %d", n, sent)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestDataConfig_Check(t *testing.T) {
	var d DataConfig
	if err := d.check(); err != nil {
		t.Fatal(err)
	}
	if d.RecordSize != 1024 || d.Partitions != DefaultDataPartitions || d.Producers != DefaultProducers ||
		d.Duration != DefaultProduceDuration || d.CatchUpBytes != 1<<30 || d.SessionTimeout != 0 {
		t.Fatalf("defaults: %+v", d)
	}
	for _, tc := range []struct {
		d    DataConfig
		want string
	}{
		{DataConfig{RecordSize: -1}, "--record-size -1"},
		{DataConfig{RecordSize: 1 << 20}, "--record-size 1048576"},
		{DataConfig{Partitions: -2}, "--produce-partitions -2"},
		{DataConfig{Producers: -1}, "--producers -1"},
		{DataConfig{Duration: time.Millisecond}, "--produce-duration 1ms"},
		{DataConfig{CatchUpBytes: 10}, "--catch-up-bytes 10"},
		{DataConfig{SessionTimeout: -time.Second}, "--broker-session-timeout -1s"},
	} {
		if err := tc.d.check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want one with %q", tc.d, err, tc.want)
		}
	}
}

func TestProduceFigures(t *testing.T) {
	ms := time.Millisecond
	run := func(append, loopback float64, acks1, acksAll int64, lat ...time.Duration) produceRun {
		return produceRun{
			ceiling: DataCeiling{AppendBytesPerS: append, LoopbackBytesPerS: loopback},
			acks1:   loadResult{acked: acks1, bytes: acks1 * 1000, took: time.Second},
			acksAll: loadResult{acked: acksAll, bytes: acksAll * 1000, took: time.Second},
			half:    loadResult{acked: acksAll / 2, bytes: acksAll / 2 * 1000, took: time.Second, latencies: lat, failed: 1},
		}
	}
	runs := []produceRun{
		run(300e6, 900e6, 90_000, 60_000, 1*ms, 2*ms, 30*ms), // ceiling 100 MB/s
		run(600e6, 300e6, 80_000, 40_000, 3*ms, 4*ms, 10*ms), // ceiling 100 MB/s
		run(900e6, 900e6, 70_000, 50_000, 2*ms, 2*ms, 2*ms),  // ceiling 300 MB/s
	}
	// The brokers' produce durations, 100 requests in each run: medians
	// of 10, 20 and 30 ms; p99 of 19.8, 29.8 and 49.6 ms.
	bounds := []float64{0.01, 0.02, 0.03, 0.05, math.Inf(1)}
	for i, counts := range [][]float64{{50, 100, 100, 100, 100}, {0, 50, 100, 100, 100}, {0, 0, 50, 100, 100}} {
		runs[i].server = histogram{bounds: bounds, counts: counts}
	}
	got := map[string]float64{}
	for _, f := range produceFigures(DataConfig{RecordSize: 1000, Producers: 4, Duration: time.Second}, runs) {
		got[f.Name] = f.Value
	}
	for name, want := range map[string]float64{
		"record_size": 1000, "producers": 4, "duration_s": 1,
		"acks_1_mb_per_s": 80, "acks_1_records_per_s": 80_000, "acks_1_ceiling_ratio": 0.8,
		"acks_all_mb_per_s": 50, "acks_all_max_mb_per_s": 60, "acks_all_records_per_s": 50_000,
		"acks_all_ceiling_ratio": 0.4, // 0.6, 0.4, 1/6
		"append_mb_per_s":        600, "loopback_mb_per_s": 900, "rf3_ceiling_mb_per_s": 100,
		"half_rate_records_per_s": 25_000,
		"latency_p50_ms":          2, "latency_p99_ms": 10, "latency_max_ms": 30,
		"failed_writes":         3,
		"broker_produce_p50_ms": 20, "broker_produce_p99_ms": 29.8,
	} {
		if v, ok := got[name]; !ok || math.Abs(v-want) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

func TestCrashResult(t *testing.T) {
	runs := []crashRun{
		{toAck: 9500 * time.Millisecond, toLeader: 9 * time.Second, retried: 3, failed: 0, requestErrors: 1},
		{toAck: 9800 * time.Millisecond, toLeader: 9200 * time.Millisecond, retried: 5, requestErrors: 2},
		{toAck: 9600 * time.Millisecond, toLeader: 9100 * time.Millisecond, retried: 4, failed: 1},
	}
	res := crashResult(DataConfig{}, runs)
	if res.Name != ScenarioLeaderCrash || res.Runs != 3 || res.MedianS != 9.6 || res.MaxS != 9.8 || res.Partitions != 1 || res.Brokers != 3 {
		t.Fatalf("result %+v", res)
	}
	for name, want := range map[string]float64{
		"session_timeout_s": 9, "new_leader_median_s": 9.1, "new_leader_max_s": 9.2,
		"failed_writes": 1, "retried_writes": 12, "produce_request_errors": 3,
	} {
		if v, ok := res.Get(name); !ok || math.Abs(v-want) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if v, _ := crashResult(DataConfig{SessionTimeout: 2 * time.Second}, runs).Get("session_timeout_s"); v != 2 {
		t.Errorf("session_timeout_s with --broker-session-timeout 2s = %v", v)
	}
}

func TestCatchUpResult(t *testing.T) {
	runs := []catchUpRun{
		{took: 4 * time.Second, filled: loadResult{bytes: 400e6, took: 8 * time.Second}},
		{took: 2 * time.Second, filled: loadResult{bytes: 400e6, took: 10 * time.Second, failed: 2}},
		{took: 5 * time.Second, filled: loadResult{bytes: 400e6, took: 4 * time.Second}},
	}
	res := catchUpResult(DataConfig{Partitions: 6, CatchUpBytes: 400e6}, runs)
	if res.Name != ScenarioCatchUp || res.MedianS != 4 || res.MaxS != 5 || res.Partitions != 6 {
		t.Fatalf("result %+v", res)
	}
	for name, want := range map[string]float64{
		"catch_up_bytes": 400e6, "catch_up_mb_per_s": 100, "write_mb_per_s": 50, "failed_writes": 2,
	} {
		if v, ok := res.Get(name); !ok || math.Abs(v-want) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}

// The data path's scenarios run only when named, in their own order.
func TestParseScenarios_DataPathOnlyWhenNamed(t *testing.T) {
	all, err := ParseScenarios("all")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if dataScenarios[s] {
			t.Errorf("all includes %s", s)
		}
	}
	got, err := ParseScenarios("catch-up, leader-crash,produce")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "produce,leader-crash,catch-up" {
		t.Fatalf("got %v, want produce,leader-crash,catch-up", got)
	}
}
