package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite_ReplacesWholeAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "meta.json")
	for _, content := range []string{"first\n", "second, longer\n", "3\n"} {
		if err := Write(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("dir holds %d entries, want only the file", len(entries))
	}
}

func TestWrite_FailsInAMissingDir(t *testing.T) {
	err := Write(filepath.Join(t.TempDir(), "nope", "meta.json"), []byte("x"))
	if err == nil {
		t.Fatal("Write into a missing dir succeeded")
	}
	if !errors.Is(PathCause(err), fs.ErrNotExist) {
		t.Fatalf("PathCause = %v", PathCause(err))
	}
}

func TestWriteMode(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		write func(path string) error
		want  os.FileMode
	}{
		{"Write: the owner only", func(p string) error { return Write(p, []byte("x")) }, 0o600},
		{"WriteMode 0644", func(p string) error { return WriteMode(p, []byte("x"), 0o644) }, 0o644},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
		if err := tc.write(path); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != tc.want {
			t.Errorf("%s: mode %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestWriteNew_NeverReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ca-key.pem")
	if err := WriteNew(path, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := WriteNew(path, []byte("second"), 0o600)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second WriteNew = %v, want fs.ErrExist", err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "first" {
		t.Fatalf("read %q, %v; want the first content", got, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("dir holds %d entries, want only the file (no temp left)", len(entries))
	}
}
