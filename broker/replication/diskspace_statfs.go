//go:build linux || darwin || freebsd

package replication

import "syscall"

// diskSpace is the size of dir's volume and the bytes free there for an
// unprivileged writer (Kafka's FileStore getTotalSpace and
// getUsableSpace); -1, -1 if the system does not say.
func diskSpace(dir string) (total, usable int64) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return -1, -1
	}
	return int64(uint64(st.Blocks) * uint64(st.Bsize)), int64(uint64(st.Bavail) * uint64(st.Bsize))
}
