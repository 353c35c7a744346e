package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"github.com/keel-dev/keel/internal/portowner"
)

// The ports of `keel dev`. With --base-port B (9092), node i's listener of
// each role is at B + 100*role + i - 1, so that broker 1's Kafka listener
// is where every Kafka client looks first, localhost:9092, and the last
// digits of every port are the node's:
//
//	brokers' Kafka listeners  B...      9092, 9093, 9094
//	controllers               B+100...  9192, 9193, 9194 (the admin commands' default --controllers)
//	brokers                   B+200...  9292, 9293, 9294
//	controllers' metrics      B+300...  9392, ... (--metrics)
//	brokers' metrics          B+400...  9492, ... (--metrics)
//
// The block sits below Linux's ephemeral range (32768 and up), so no
// outgoing connection's own end takes one of its ports meanwhile.
const (
	devBasePort   = 9092
	devRoleStride = 100 // the ports of one role: the most brokers a layout holds
	devRoles      = 5
	devMaxBase    = 65535 - devRoles*devRoleStride + 1
)

// devRole is a kind of listener in the layout, in the order of its blocks.
type devRole int

const (
	devKafka devRole = iota
	devController
	devBroker
	devControllerMetrics
	devBrokerMetrics
)

// devSlot is one listener of the dev cluster: a role of node id.
type devSlot struct {
	role devRole
	id   int32
}

func (s devSlot) String() string {
	switch s.role {
	case devKafka:
		return fmt.Sprintf("broker %d's Kafka listener", s.id)
	case devController:
		return fmt.Sprintf("controller %d", s.id)
	case devBroker:
		return fmt.Sprintf("broker %d", s.id)
	case devControllerMetrics:
		return fmt.Sprintf("controller %d's metrics", s.id)
	default:
		return fmt.Sprintf("broker %d's metrics", s.id)
	}
}

// port is s's port in the layout from base.
func (s devSlot) port(base int) int {
	return base + devRoleStride*int(s.role) + int(s.id) - 1
}

// devSlots lists the listeners of a cluster of nControllers and nBrokers,
// with their metrics servers when metrics is set.
func devSlots(nControllers, nBrokers int, metrics bool) []devSlot {
	var out []devSlot
	add := func(role devRole, n int) {
		for i := 1; i <= n; i++ {
			out = append(out, devSlot{role: role, id: int32(i)})
		}
	}
	add(devController, nControllers)
	add(devBroker, nBrokers)
	add(devKafka, nBrokers)
	if metrics {
		add(devControllerMetrics, nControllers)
		add(devBrokerMetrics, nBrokers)
	}
	return out
}

// checkDevBasePort refuses a --base-port whose layout does not fit the
// ports or the brokers.
func checkDevBasePort(base, brokers int) error {
	if base != 0 && (base < 1 || base > devMaxBase) {
		return fmt.Errorf("--base-port %d: want 0 (free ports) or 1 to %d (the layout takes %d ports from it)", base, devMaxBase, devRoles*devRoleStride)
	}
	if base != 0 && brokers > devRoleStride {
		return fmt.Errorf("--brokers-count %d: the port layout of --base-port holds %d brokers; give --base-port 0 for free ports", brokers, devRoleStride)
	}
	return nil
}

// devPlan is where each listener binds: a saved address, its port in the
// layout, or "127.0.0.1:0" for a free one; moved says, for each listener
// that found its layout port taken, which port and why.
type devPlan struct {
	addrs map[devSlot]string
	moved map[devSlot]devMove
}

// devMove is a layout port a listener did not get, and why.
type devMove struct {
	port int
	why  error
}

// planDevAddrs places every slot. A saved address is the one a user has
// exported, so it is kept or refused in one line naming it and the file it
// was saved in: never moved. Otherwise a slot takes its port in the layout
// from base (0: none) when inUse says it is free, and a free port when not.
func planDevAddrs(slots []devSlot, saved map[devSlot]string, base int, inUse func(addr string) error, statePath string) (devPlan, error) {
	p := devPlan{addrs: map[devSlot]string{}, moved: map[devSlot]devMove{}}
	// A saved address is not bound yet, but it is not free for another
	// listener either.
	kept := map[string]bool{}
	for _, addr := range saved {
		kept[addr] = true
	}
	var taken []string
	var firstErr error
	for _, s := range slots {
		if addr, ok := saved[s]; ok {
			if err := inUse(addr); err != nil {
				taken = append(taken, addr)
				if firstErr == nil {
					firstErr = fmt.Errorf("%s (%s, saved in %s): %w", addr, s, statePath, err)
				}
			}
			p.addrs[s] = addr
			continue
		}
		p.addrs[s] = "127.0.0.1:0"
		if base == 0 {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port(base)))
		why := inUse(addr)
		if kept[addr] {
			why = errors.New("saved for another listener")
		}
		if why == nil {
			p.addrs[s] = addr
		} else {
			p.moved[s] = devMove{port: s.port(base), why: why}
		}
	}
	if firstErr != nil {
		more := ""
		if len(taken) > 1 {
			more = fmt.Sprintf(" (and %d more saved addresses)", len(taken)-1)
		}
		return devPlan{}, fmt.Errorf("%w%s: stop what holds it, or give another --data-dir", firstErr, more)
	}
	return p, nil
}

// movedNotes are the banner's lines for the listeners that found their
// port in the layout taken, in slots' order: "9092 is taken (address
// already in use by java (pid 4242)): broker 1's Kafka listener is at
// 127.0.0.1:41233". at gives a slot's bound address.
func (p devPlan) movedNotes(slots []devSlot, at func(devSlot) string) []string {
	var out []string
	for _, s := range slots {
		if m, ok := p.moved[s]; ok {
			out = append(out, fmt.Sprintf("%d is taken (%v): %s is at %s", m.port, m.why, s, at(s)))
		}
	}
	return out
}

// devPortInUse says why addr cannot be listened on: an error when it is
// taken ("address already in use by NAME (pid N)" when it can tell by
// whom), nil when it is free. A loopback port is also taken when another
// process holds it on IPv6's loopback, where a client dialing
// localhost:PORT may reach that process first.
func devPortInUse(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			return err
		}
		return inUseBy(errno, port) // "address already in use", without the whole *OpError
	}
	ln.Close()
	if host != "127.0.0.1" {
		return nil
	}
	ln6, err := net.Listen("tcp", net.JoinHostPort("::1", port))
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w on [::1], where localhost also leads", inUseBy(syscall.EADDRINUSE, port))
	}
	if err == nil {
		ln6.Close()
	}
	return nil // no IPv6 loopback here: nothing for localhost to reach there
}

// inUseBy is errno, with the process that listens on port when errno is
// EADDRINUSE and the system can tell.
func inUseBy(errno syscall.Errno, port string) error {
	if errno != syscall.EADDRINUSE {
		return errno
	}
	// Only now: naming the owner reads every process's sockets in /proc.
	p, _ := strconv.Atoi(port)
	if owner := portowner.Of(p); owner != "" {
		return fmt.Errorf("%w by %s", errno, owner)
	}
	return errno
}
