package keelproc

import "syscall"

// procAttr puts a keel process in its own process group (a Ctrl-C reaches
// the caller, which stops it) and has the kernel kill it should the caller
// die without cleaning up.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
