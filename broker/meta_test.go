package broker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMeta(t *testing.T) {
	tests := []struct {
		name string
		// file is meta.json's content before openMeta; "" for none.
		file    string
		id      int32
		wantErr string
		check   func(t *testing.T, m *metaFile)
	}{
		{
			name: "a new data dir is claimed for the broker",
			id:   4,
			check: func(t *testing.T, m *metaFile) {
				reopened, err := openMeta(filepath.Dir(m.path), 4)
				if err != nil || reopened.clusterID() != "" {
					t.Fatalf("reopen: %v, cluster %q", err, reopened.clusterID())
				}
			},
		},
		{
			name: "the same broker reopens it with its cluster id",
			file: `{"format":1,"broker_id":4,"cluster_id":"c1"}`,
			id:   4,
			check: func(t *testing.T, m *metaFile) {
				if m.clusterID() != "c1" {
					t.Fatalf("cluster id %q", m.clusterID())
				}
			},
		},
		{name: "another broker's data dir is refused", file: `{"format":1,"broker_id":5,"cluster_id":"c1"}`, id: 4, wantErr: "belongs to broker 5, not broker 4"},
		{name: "a corrupt file is refused", file: `{"format":1,"broker_`, id: 4, wantErr: "is corrupt"},
		{name: "an unknown format is refused", file: `{"format":2,"broker_id":4}`, id: 4, wantErr: "has format 2"},
		{
			name: "the cluster id is learned once, written through, and kept",
			id:   4,
			check: func(t *testing.T, m *metaFile) {
				if learned, err := m.learnClusterID("c1", "the controllers"); !learned || err != nil {
					t.Fatalf("first learn: %v %v", learned, err)
				}
				if learned, err := m.learnClusterID("c1", "the controllers"); learned || err != nil {
					t.Fatalf("same id again: %v %v", learned, err)
				}
				if learned, err := m.learnClusterID("", "the controllers"); learned || err != nil {
					t.Fatalf("no id: %v %v", learned, err)
				}
				_, err := m.learnClusterID("c2", "the controllers at h:1")
				if !errors.Is(err, ErrClusterMismatch) || !strings.Contains(err.Error(), "belongs to cluster c1, but the controllers at h:1 are cluster c2") {
					t.Fatalf("another id: %v", err)
				}
				reopened, err := openMeta(filepath.Dir(m.path), 4)
				if err != nil || reopened.clusterID() != "c1" {
					t.Fatalf("reopen: %v, cluster %q", err, reopened.clusterID())
				}
				// Nothing but meta.json is left behind by the atomic writes.
				entries, _ := os.ReadDir(filepath.Dir(m.path))
				if len(entries) != 1 {
					t.Fatalf("data dir holds %v", entries)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if tt.file != "" {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, metaFileName), []byte(tt.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m, err := openMeta(dir, tt.id)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, m)
		})
	}
}
