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
func WriteMode(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, os.Rename)
}

// WriteNew is WriteMode for a file that must not exist yet: it fails with
// an error matching fs.ErrExist, and changes nothing, if path exists,
// even if another process creates it meanwhile (the temp file is linked to
// path, which never replaces a file, and then removed). A certificate
// authority's key, say, is never overwritten by mistake.
func WriteNew(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, func(tmp, path string) error {
		if err := os.Link(tmp, path); err != nil {
			return err
		}
		return os.Remove(tmp)
	})
}

// write writes data to a temp file beside path, with mode perm, fsyncs it,
// puts it at path with place, and fsyncs the directory.
func write(path string, data []byte, perm fs.FileMode, place func(tmp, path string) error) (err error) {
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
	if err = place(tmp, path); err != nil {
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
