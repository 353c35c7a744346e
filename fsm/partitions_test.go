package fsm

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/keel-dev/keel/proto/keelpb"
)

var (
	topicA = TopicID{0xa}
	topicB = TopicID{0xb}
)

func topicRec(name string, id TopicID, configs map[string]string) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_Topic{Topic: &keelpb.TopicRecord{Name: name, TopicId: bytes.Clone(id[:]), Configs: configs}}}
}

func partRec(id TopicID, p int32, replicas, isr []int32, leader int32) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_Partition{Partition: &keelpb.PartitionRecord{
		TopicId: bytes.Clone(id[:]), Partition: p, Replicas: replicas, Isr: isr, Leader: leader}}}
}

// change builds a PartitionChangeRecord; nil slices and a nil leader are "unchanged".
func change(id TopicID, p int32, leader *int32, isr, replicas []int32) *keelpb.Record {
	r := &keelpb.PartitionChangeRecord{TopicId: bytes.Clone(id[:]), Partition: p, Leader: leader}
	if isr != nil {
		r.Isr = &keelpb.Int32List{Values: isr}
	}
	if replicas != nil {
		r.Replicas = &keelpb.Int32List{Values: replicas}
	}
	return &keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: r}}
}

func leader(id int32) *int32 { return &id }

func removeTopic(id TopicID) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_RemoveTopic{RemoveTopic: &keelpb.RemoveTopicRecord{TopicId: bytes.Clone(id[:])}}}
}

func shuttingDown(id int32, epoch int64) *keelpb.Record {
	return &keelpb.Record{Record: &keelpb.Record_BrokerShuttingDown{BrokerShuttingDown: &keelpb.BrokerShuttingDownRecord{BrokerId: id, BrokerEpoch: epoch}}}
}

// withTopics: brokers 1-3 active (epochs 2-4), topic "a" with partitions 0
// (replicas 1,2,3, leader 1) and 1 (replicas 2,3,1, leader 2).
func withTopics(t *testing.T) *Image {
	return replay(t,
		batch(clusterID("c"), featureLevel(1), epoch(1, 1)),
		batch(register(1, "a")), batch(register(2, "b")), batch(register(3, "c")),
		batch(unfence(1, 2), unfence(2, 3), unfence(3, 4)),
		batch(topicRec("a", topicA, nil), partRec(topicA, 0, []int32{1, 2, 3}, []int32{1, 2, 3}, 1), partRec(topicA, 1, []int32{2, 3, 1}, []int32{2, 3, 1}, 2)),
	)
}

func partitionsOn(img *Image, broker int32) []int32 {
	var out []int32
	img.PartitionsOnBroker(broker, func(p *Partition) bool {
		out = append(out, p.Partition)
		return true
	})
	return out
}

func TestFSM_Partitions(t *testing.T) {
	tests := []struct {
		name    string
		batch   *keelpb.RecordBatch
		wantErr string
		check   func(t *testing.T, img *Image)
	}{
		{
			name:  "ISR shrink keeps the leader epoch, bumps the partition epoch",
			batch: batch(change(topicA, 0, nil, []int32{1, 2}, nil)),
			check: func(t *testing.T, img *Image) {
				p, _ := img.Partition(topicA, 0)
				if p.LeaderEpoch != 0 || p.PartitionEpoch != 1 || !slices.Equal(p.ISR, []int32{1, 2}) {
					t.Fatalf("partition = %+v", p)
				}
			},
		},
		{
			name:  "leader change bumps both epochs",
			batch: batch(change(topicA, 0, leader(2), []int32{2, 3}, nil)),
			check: func(t *testing.T, img *Image) {
				p, _ := img.Partition(topicA, 0)
				if p.Leader != 2 || p.LeaderEpoch != 1 || p.PartitionEpoch != 1 {
					t.Fatalf("partition = %+v", p)
				}
			},
		},
		{
			name:  "removing a replica bumps the leader epoch and moves the index",
			batch: batch(change(topicA, 0, nil, []int32{1, 2}, []int32{1, 2})),
			check: func(t *testing.T, img *Image) {
				p, _ := img.Partition(topicA, 0)
				if p.Leader != 1 || p.LeaderEpoch != 1 || p.PartitionEpoch != 1 {
					t.Fatalf("partition = %+v", p)
				}
				if got := partitionsOn(img, 3); !slices.Equal(got, []int32{1}) {
					t.Fatalf("partitions on broker 3 = %v, want [1]", got)
				}
			},
		},
		{
			name:  "leaderless partition keeps its last ISR member",
			batch: batch(change(topicA, 0, leader(NoLeader), []int32{1}, nil)),
			check: func(t *testing.T, img *Image) {
				p, _ := img.Partition(topicA, 0)
				if p.HasLeader() || !slices.Equal(p.ISR, []int32{1}) || p.LeaderEpoch != 1 {
					t.Fatalf("partition = %+v", p)
				}
			},
		},
		{
			name:  "a new topic and its partitions",
			batch: batch(topicRec("b", topicB, map[string]string{UncleanLeaderElection: "true"}), partRec(topicB, 0, []int32{3}, []int32{3}, 3)),
			check: func(t *testing.T, img *Image) {
				tp, ok := img.Topic("b")
				if !ok || tp.Partitions != 1 || !img.UncleanElection(tp) || img.TopicCount() != 2 || img.PartitionCount() != 3 {
					t.Fatalf("topic b = %+v, %d topics, %d partitions", tp, img.TopicCount(), img.PartitionCount())
				}
				if got := partitionsOn(img, 3); len(got) != 3 {
					t.Fatalf("partitions on broker 3 = %v", got)
				}
			},
		},
		{
			name:  "remove a topic and everything on its brokers",
			batch: batch(removeTopic(topicA)),
			check: func(t *testing.T, img *Image) {
				if _, ok := img.Topic("a"); ok || img.PartitionCount() != 0 || len(partitionsOn(img, 1)) != 0 {
					t.Fatalf("topic a still there: %d partitions", img.PartitionCount())
				}
			},
		},
		{
			name:  "broker in controlled shutdown",
			batch: batch(shuttingDown(2, 3)),
			check: func(t *testing.T, img *Image) {
				b, _ := img.Broker(2)
				if b.State() != BrokerShuttingDown || b.Eligible() {
					t.Fatalf("broker 2 = %+v", b)
				}
			},
		},
		{name: "leader outside the ISR", batch: batch(change(topicA, 0, leader(3), []int32{1, 2}, nil)), wantErr: "leader 3 is not in the isr [1 2]"},
		{name: "empty ISR below metadata.version 3", batch: batch(change(topicA, 0, leader(NoLeader), []int32{}, nil)), wantErr: "an empty isr needs metadata.version 3"},
		{name: "ISR outside the replicas", batch: batch(change(topicA, 0, nil, []int32{1, 4}, nil)), wantErr: "not a subset of replicas"},
		{name: "duplicate replica", batch: batch(change(topicA, 0, nil, nil, []int32{1, 2, 2})), wantErr: "has a duplicate"},
		{name: "change that changes nothing", batch: batch(change(topicA, 0, leader(1), nil, nil)), wantErr: "changes nothing"},
		{name: "unknown partition", batch: batch(change(topicA, 5, leader(1), nil, nil)), wantErr: "does not exist"},
		{name: "duplicate topic name", batch: batch(topicRec("a", topicB, nil)), wantErr: `topic "a" already exists`},
		{name: "duplicate topic id", batch: batch(topicRec("b", topicA, nil)), wantErr: "already exists"},
		{name: "partition out of order", batch: batch(partRec(topicA, 3, []int32{1}, []int32{1}, 1)), wantErr: "the next partition is 2"},
		{name: "partition of an unknown topic", batch: batch(partRec(topicB, 0, []int32{1}, []int32{1}, 1)), wantErr: "does not exist"},
		{name: "shutting down twice", batch: batch(shuttingDown(2, 3), shuttingDown(2, 3)), wantErr: "record 1 (broker_shutting_down)"},
		{
			name:    "all or nothing: a bad partition drops its topic",
			batch:   batch(topicRec("b", topicB, nil), partRec(topicB, 0, []int32{1}, []int32{2}, 1)),
			wantErr: "record 1 (partition)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := withTopics(t)
			before := imageBytes(t, start)
			got, err := Apply(start, 100, 3, tt.batch)
			if !bytes.Equal(imageBytes(t, start), before) {
				t.Fatal("Apply modified the image it was given")
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, got)
			// Whatever the change, a snapshot restores the same image.
			restored, err := ReadSnapshot(bytes.NewReader(imageBytes(t, got)))
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			if !sameImage(t, restored, got) {
				t.Fatal("snapshot round trip changed the image")
			}
			for b := int32(1); b <= 3; b++ {
				if !slices.Equal(partitionsOn(restored, b), partitionsOn(got, b)) {
					t.Fatalf("replica index of broker %d differs after restore", b)
				}
			}
		})
	}
}

func TestTopicID_RoundTrip(t *testing.T) {
	id := TopicID{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8}
	s := id.String()
	if s != "12345678-9abc-def0-0102-030405060708" {
		t.Fatalf("String() = %s", s)
	}
	got, err := ParseTopicID(s)
	if err != nil || got != id {
		t.Fatalf("ParseTopicID(%s) = %v, %v", s, got, err)
	}
	for _, bad := range []string{"", "xyz", "12345678-9abc-def0-0102-03040506070g"} {
		if _, err := ParseTopicID(bad); err == nil {
			t.Errorf("ParseTopicID(%q) succeeded", bad)
		}
	}
}

func TestScanSnapshot_ReportsWhatItHolds(t *testing.T) {
	img := withTopics(t)
	var types []string
	info, err := ScanSnapshot(bytes.NewReader(imageBytes(t, img)), func(r *keelpb.Record) error {
		types = append(types, RecordType(r))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if info.Brokers != 3 || info.Topics != 1 || info.Partitions != 2 || info.Records != uint64(len(types)) ||
		info.ClusterID != "c" || info.Index != img.Offset || info.ControllerEpoch != 1 || len(info.SHA256) != 32 {
		t.Fatalf("info = %+v, %d records seen", info, len(types))
	}
	if types[0] != "cluster_id" || types[len(types)-1] != "partition" {
		t.Fatalf("record order %v", types)
	}
}

func TestVerifySnapshot_AgreesWithScanWithoutBuilding(t *testing.T) {
	data := imageBytes(t, withTopics(t))
	quick, err := VerifySnapshot(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	full, err := ScanSnapshot(bytes.NewReader(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	if quick.Brokers != full.Brokers || quick.Topics != full.Topics || quick.Partitions != full.Partitions || quick.Records != full.Records {
		t.Fatalf("verify %+v, scan %+v", quick, full)
	}
	data[len(data)/2] ^= 1
	if _, err := VerifySnapshot(bytes.NewReader(data)); err == nil {
		t.Fatal("a flipped byte verified")
	}
}
