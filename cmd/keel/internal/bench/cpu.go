package bench

import (
	"sync"
	"time"

	"github.com/keel-dev/keel/keeltest/keelproc"
)

// cpuSampleInterval is how often the meter looks for new processes: a
// process it has seen once is measured to its end (its reaping gives the
// exact figure), so only one that starts and dies between two looks would
// be missed, and no scenario has one.
const cpuSampleInterval = 200 * time.Millisecond

// cpuUse is CPU time by role: the `keel controller` and `keel broker`
// processes the bench started, and the bench process itself (the simulated
// brokers, the Kafka clients, the admin client).
type cpuUse struct {
	controllers, brokers, bench time.Duration
	// controllerProcs and brokerProcs are how many processes of each
	// role were ever seen: no brokers on the control plane's cluster,
	// whose brokers are simulated in the bench, and no controllers for a
	// bench of a running quorum (--controllers), which it cannot measure.
	controllerProcs, brokerProcs int
	// ok is false where a figure could not be read (no /proc).
	ok bool
}

// minus is the use between two samples.
func (u cpuUse) minus(before cpuUse) cpuUse {
	return cpuUse{
		controllers:     u.controllers - before.controllers,
		brokers:         u.brokers - before.brokers,
		bench:           u.bench - before.bench,
		controllerProcs: u.controllerProcs,
		brokerProcs:     u.brokerProcs,
		ok:              u.ok && before.ok,
	}
}

// cpuMeter sums the CPU time of every process of the clusters it watches,
// by role, since each started: a killed or restarted process keeps
// counting with its figure at exit, so the difference of two samples is
// what the processes used between them, dead ones included.
type cpuMeter struct {
	mu       sync.Mutex
	clusters []*keelproc.Cluster
	procs    map[*keelproc.Proc]bool // every process seen; true for a broker
	stop     chan struct{}
	done     chan struct{}
}

// startCPUMeter starts the meter's look for new processes every
// cpuSampleInterval; stop ends it.
func startCPUMeter() *cpuMeter {
	m := &cpuMeter{procs: map[*keelproc.Proc]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(cpuSampleInterval)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				m.observe()
			}
		}
	}()
	return m
}

func (m *cpuMeter) close() {
	close(m.stop)
	<-m.done
}

// watch adds a cluster whose processes count from now on.
func (m *cpuMeter) watch(c *keelproc.Cluster) {
	m.mu.Lock()
	m.clusters = append(m.clusters, c)
	m.mu.Unlock()
	m.observe()
}

// observe notes the current process of every node of the clusters.
func (m *cpuMeter) observe() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.clusters {
		for _, nd := range c.Controllers() {
			if p := nd.Proc(); p != nil {
				m.procs[p] = false
			}
		}
		for _, nd := range c.Brokers() {
			if p := nd.Proc(); p != nil {
				m.procs[p] = true
			}
		}
	}
}

// sample is the CPU time used so far by every process seen, by role, and
// by the bench process.
func (m *cpuMeter) sample() cpuUse {
	m.observe()
	m.mu.Lock()
	defer m.mu.Unlock()
	u := cpuUse{ok: true}
	for p, broker := range m.procs {
		d, err := p.CPUTime()
		if err != nil {
			u.ok = false
			continue
		}
		if broker {
			u.brokers += d
			u.brokerProcs++
		} else {
			u.controllers += d
			u.controllerProcs++
		}
	}
	self, err := selfCPU()
	if err != nil {
		u.ok = false
	}
	u.bench = self
	return u
}
