package bench

import "syscall"

// procAttr puts a controller in its own process group (a Ctrl-C reaches
// the bench, which stops it) and has the kernel kill it should the bench
// die without cleaning up.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
