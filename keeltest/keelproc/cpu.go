package keelproc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/PID/stat's times: the kernel reports them in
// USER_HZ, which is 100 on every architecture Linux exports to user space
// (sysconf(_SC_CLK_TCK), without cgo to ask it).
const userHZ = 100

// Proc is the node's latest process, or nil before its first start. A
// caller that keeps it can still read the CPU time of a process that has
// exited since (Proc.CPUTime), after the node has started another.
func (nd *Node) Proc() *Proc { return nd.process() }

// CPUTime is the user plus system CPU time the process has used, every
// thread of it and the children it has waited for. While it runs, that is
// read from /proc/PID/stat (Linux; 10 ms resolution); once it has exited,
// from the resource usage its reaping returned, which is exact and stays
// readable. It fails only where /proc is missing.
func (p *Proc) CPUTime() (time.Duration, error) {
	if p.Running() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
		if err == nil {
			st, perr := ParseStat(string(b))
			if perr != nil {
				return 0, fmt.Errorf("/proc/%d/stat: %w", p.Pid(), perr)
			}
			return st.CPU(), nil
		}
		if p.Running() {
			return 0, err
		}
		// It exited between the two looks: its reaping has the figure.
	}
	<-p.done
	st := p.cmd.ProcessState
	return st.UserTime() + st.SystemTime(), nil
}

// Stat is what /proc/PID/stat says of a process's CPU time, in clock
// ticks (USER_HZ): its own user and system time (all its threads) and that
// of the children it has waited for.
type Stat struct {
	UTime, STime, CUTime, CSTime uint64
}

// CPU is the stat's user plus system time, children included.
func (s Stat) CPU() time.Duration {
	ticks := s.UTime + s.STime + s.CUTime + s.CSTime
	return time.Duration(ticks) * (time.Second / userHZ)
}

// ParseStat reads a /proc/PID/stat line (proc(5)). The command name, field
// 2, is in parentheses and may itself hold spaces and parentheses, so the
// fields are counted from the last ')'. utime, stime, cutime and cstime are
// fields 14 to 17.
func ParseStat(line string) (Stat, error) {
	end := strings.LastIndexByte(line, ')')
	if end < 0 || !strings.Contains(line[:end], "(") {
		return Stat{}, errors.New("no command name in parentheses")
	}
	// After the name: field 3 (state) onwards.
	f := strings.Fields(line[end+1:])
	const first = 3 // the field number of f[0]
	if len(f) < 17-first+1 {
		return Stat{}, fmt.Errorf("%d fields after the command name, want at least %d", len(f), 17-first+1)
	}
	var st Stat
	for i, dst := range []*uint64{&st.UTime, &st.STime, &st.CUTime, &st.CSTime} {
		// cutime and cstime are signed in the kernel (long), never negative
		// in practice.
		v, err := strconv.ParseInt(f[14-first+i], 10, 64)
		if err != nil || v < 0 {
			return Stat{}, fmt.Errorf("field %d %q: not a tick count", 14+i, f[14-first+i])
		}
		*dst = uint64(v)
	}
	return st, nil
}
