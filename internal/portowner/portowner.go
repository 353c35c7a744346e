// Package portowner names the local process that listens on a TCP port, so
// that an error about a port a user asked for (keel dev's) can say what
// holds it rather than only that something does.
package portowner

import "strconv"

// Of describes a process of this machine listening on TCP port, as
// "NAME (pid N)", or returns "" when it cannot tell: no such listener, a
// process this user may not look into, or a system without /proc.
func Of(port int) string {
	pid, name := listener(port)
	if pid == 0 {
		return ""
	}
	return name + " (pid " + strconv.Itoa(pid) + ")"
}
