package portowner

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// listener finds a listening socket on port in /proc/net/tcp{,6}, then the
// process holding it among /proc/*/fd: the first whose descriptors this
// user may read.
func listener(port int) (pid int, name string) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		listeningInodes(table, port, inodes)
	}
	if len(inodes) == 0 {
		return 0, ""
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, ""
	}
	for _, p := range procs {
		id, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		if err != nil {
			continue // gone, or another user's
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				comm, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "comm"))
				return id, strings.TrimSpace(string(comm))
			}
		}
	}
	return 0, ""
}

// listeningInodes adds to inodes those of table's sockets that listen on
// port. A line is "sl local_address rem_address st ... uid timeout inode",
// the address as hex IP:PORT, state 0A being LISTEN.
func listeningInodes(table string, port int, inodes map[string]bool) {
	f, err := os.Open(table)
	if err != nil {
		return
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" || !strings.HasSuffix(fields[1], want) {
			continue
		}
		inodes[fields[9]] = true
	}
}
