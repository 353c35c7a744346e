package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// testSnapshot is a snapshot of an image with one cluster id, two brokers,
// one topic of three partitions, at index 7, term 2.
func testSnapshot(t *testing.T) []byte {
	t.Helper()
	reg := func(id int32) *keelpb.Record {
		return &keelpb.Record{Record: &keelpb.Record_BrokerRegistration{BrokerRegistration: &keelpb.BrokerRegistrationRecord{
			BrokerId: id, IncarnationId: "inc-" + string(rune('a'+id)), Address: "127.0.0.1:9201",
			MinMetadataVersion: 1, MaxMetadataVersion: 1,
		}}}
	}
	topicID := bytes.Repeat([]byte{7}, 16)
	recs := []*keelpb.Record{
		{Record: &keelpb.Record_ClusterId{ClusterId: &keelpb.ClusterIdRecord{ClusterId: "cluster-x"}}},
		{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{Name: fsm.MetadataVersionFeature, Level: 1}}},
		{Record: &keelpb.Record_ControllerEpoch{ControllerEpoch: &keelpb.ControllerEpochRecord{Epoch: 1, LeaderId: 1}}},
		reg(1), reg(2),
		{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: "t", TopicId: topicID}}},
	}
	for p := range int32(3) {
		recs = append(recs, &keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
			TopicId: topicID, Partition: p, Replicas: []int32{1, 2}, Isr: []int32{1, 2}, Leader: 1}}})
	}
	img, err := fsm.Apply(fsm.Empty(), 7, 2, &keelpb.RecordBatch{Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := fsm.WriteSnapshot(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fakeSnapshotServer answers FetchSnapshot with data in chunks of chunk
// bytes.
type fakeSnapshotServer struct {
	keelpb.UnimplementedControllerServiceServer
	data  []byte
	chunk int
}

func (f *fakeSnapshotServer) FetchSnapshot(_ *keelpb.FetchSnapshotRequest, stream grpc.ServerStreamingServer[keelpb.SnapshotChunk]) error {
	data := f.data
	for len(data) > f.chunk {
		if err := stream.Send(&keelpb.SnapshotChunk{Data: data[:f.chunk]}); err != nil {
			return err
		}
		data = data[f.chunk:]
	}
	return stream.Send(&keelpb.SnapshotChunk{Data: data, Last: true})
}

func wantSummary(t *testing.T, got snapshotSummary, size int) {
	t.Helper()
	if got.FormatVersion != fsm.SnapshotFormatVersion || got.ClusterID != "cluster-x" || got.Index != 7 || got.Term != 2 ||
		got.ControllerEpoch != 1 || got.Brokers != 2 || got.Topics != 1 || got.Partitions != 3 ||
		got.SizeBytes != int64(size) || len(got.SHA256) != 64 {
		t.Errorf("summary = %+v; want version 1, cluster-x, index 7, term 2, epoch 1, 2 brokers, 1 topic, 3 partitions, %d bytes, a hex SHA-256", got, size)
	}
}

func TestSnapshotSave_WritesVerifiedFile(t *testing.T) {
	data := testSnapshot(t)
	addr := serveGRPC(t, func(g *grpc.Server) {
		keelpb.RegisterControllerServiceServer(g, &fakeSnapshotServer{data: data, chunk: 10})
	})
	file := filepath.Join(t.TempDir(), "meta.snap")
	out, err := runKeel(t, "snapshot", "save", file, "--controllers", addr, "-o", "json")
	if err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}
	var got snapshotSummary
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	wantSummary(t, got, len(data))
	if got.ElapsedSeconds <= 0 {
		t.Errorf("elapsed_seconds = %v, want > 0", got.ElapsedSeconds)
	}
	written, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(written, data) {
		t.Fatalf("file holds %d bytes (%v), want the %d served", len(written), err, len(data))
	}
	if left, _ := filepath.Glob(file + ".tmp-*"); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
}

func TestSnapshotSave_RefusesCorruptStreamAndLeavesNothing(t *testing.T) {
	data := testSnapshot(t)
	data[len(data)/2] ^= 1
	addr := serveGRPC(t, func(g *grpc.Server) {
		keelpb.RegisterControllerServiceServer(g, &fakeSnapshotServer{data: data, chunk: 1 << 20})
	})
	dir := t.TempDir()
	file := filepath.Join(dir, "meta.snap")
	_, err := runKeel(t, "snapshot", "save", file, "--controllers", addr)
	if err == nil || !strings.Contains(err.Error(), "does not verify") || strings.Contains(errorLine(err), "\n") {
		t.Fatalf("save of a corrupt stream: err %v; want one line saying it does not verify", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left after a failed save: %v", entries)
	}
}

func TestSnapshotInspect(t *testing.T) {
	data := testSnapshot(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", data)

	out, err := runKeel(t, "snapshot", "inspect", good, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got snapshotSummary
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out)
	}
	wantSummary(t, got, len(data))

	out, err = runKeel(t, "snapshot", "inspect", good)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cluster-x", "Partitions:", got.SHA256, "bytes"} {
		if !strings.Contains(out, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}

	flipped := bytes.Clone(data)
	flipped[len(flipped)-5] ^= 0x80
	badMagic := bytes.Clone(data)
	badMagic[0] = 'X'
	for _, tc := range []struct {
		name, file, want string
	}{
		{"truncated", write("truncated", data[:len(data)-10]), "corrupt snapshot"},
		{"flipped byte", write("flipped", flipped), "corrupt snapshot"},
		{"not a snapshot", write("magic", badMagic), "bad magic"},
		{"empty", write("empty", nil), "bad magic"},
		{"missing", filepath.Join(dir, "nope"), "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runKeel(t, "snapshot", "inspect", tc.file)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(errorLine(err), "\n") || out != "" {
				t.Errorf("inspect: err %v, out %q; want one line containing %q and no output", err, out, tc.want)
			}
		})
	}
	if _, err := runKeel(t, "snapshot", "inspect", good, "-o", "yaml"); err == nil {
		t.Error("inspect -o yaml: no error")
	}
}

// A save whose context is already over fails rather than hanging.
func TestSnapshotFetch_ContextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	addr := serveGRPC(t, func(g *grpc.Server) {
		keelpb.RegisterControllerServiceServer(g, &fakeSnapshotServer{data: testSnapshot(t), chunk: 10})
	})
	root := newRootCmd()
	root.SetArgs([]string{"snapshot", "save", filepath.Join(t.TempDir(), "x"), "--controllers", addr})
	root.SetOut(&bytes.Buffer{})
	if err := root.ExecuteContext(ctx); err == nil {
		t.Fatal("save with a cancelled context succeeded")
	}
}
