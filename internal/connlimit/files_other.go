//go:build !unix

package connlimit

// OpenFilesLimit is a generous stand-in where there is no RLIMIT_NOFILE.
func OpenFilesLimit() (int, error) { return 1 << 16, nil }
