// Package atomicfile writes small files so that a crash leaves either the
// old content or the new, never a torn file: the meta files that tie a data
// dir to one node, broker and cluster must always read back whole.
package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Write writes a temp file in path's directory, fsyncs it, renames it over
// path, then fsyncs the directory so the rename itself survives a crash.
// The file is readable by its owner only.
func Write(path string, data []byte) error { return WriteMode(path, data, 0o600) }

// WriteMode is Write for a file with mode perm, which it has from the start
// (a key is never readable by others, even for a moment).
func WriteMode(path string, data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// PathCause drops the path that an *fs.PathError repeats, for messages that
// name the file themselves.
func PathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
