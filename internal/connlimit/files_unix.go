//go:build unix

package connlimit

import "syscall"

// OpenFilesLimit is the process's open-files limit (RLIMIT_NOFILE) now:
// Go raises the soft limit to the hard one at start, so it is the hard
// one unless something lowered it since.
func OpenFilesLimit() (int, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	return int(min(r.Cur, 1<<30)), nil
}
