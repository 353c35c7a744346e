// Package bench is the library behind `keel bench`: it starts a real
// 3-controller quorum on loopback (or targets a running one), attaches
// simulated brokers over real gRPC, runs named scenarios and reports median
// and max figures over runs, next to the commit rate of raw hashicorp/raft on
// the same records on the same machine.
//
// Simulated brokers come in two kinds. A full broker is an in-process
// broker.Agent: it replays the whole metadata image with the controllers' own
// state machine, as a real broker does. A thin broker runs the agent's own
// session (broker.Session): it registers, heartbeats at the default
// interval, consumes the metadata stream and acknowledges the offsets it has
// received, but keeps no image: it scans each pushed batch for the few
// records that concern the bench (broker state, topics, the controller epoch,
// and, when asked, leader changes of chosen partitions), so a hundred of them
// fit on one machine. Every broker notes when it first
// received each offset, so "every broker has applied X" is timed at the
// brokers, not by polling.
//
// Scenarios (in the order they run):
//
//   - create: P partitions (RF 3) in topics of at most 10,000, created
//     concurrently; partitions committed per second and the time until every
//     broker has them.
//   - heartbeats: heartbeat latency p50/p99 of every thin broker at the
//     default 2 s interval, measured at the client over a window.
//   - broker-failure: the thin broker leading the most partitions stops
//     without a word; from the commit of its FenceBroker record until every
//     partition it led has a new leader, and until every live broker has it.
//   - controlled-shutdown: the thin broker leading the most partitions shuts
//     down cleanly; the time until the controller lets it exit, having
//     fenced it (it stays registered; the bench starts a new incarnation).
//   - failover: kill -9 of the active controller; the time to a new active
//     controller, and until every broker streams from it again.
//   - load: kill -9 of every controller after a raft snapshot of the P
//     partitions; the time until a new active controller holds them all, and
//     the live heap of each controller.
//
// The data path's scenarios (produce, leader-crash, catch-up) run only when
// named, on a cluster of their own: three controllers and three real `keel
// broker` processes with Kafka listeners, written to by franz-go producers
// in the bench process (dataplane.go). The produce scenario measures the
// machine's own ceiling in the same run (dataceiling.go): one partition
// log's append rate in process, and the loopback bandwidth to a child
// `keel bench-sink`.
//
// Every scenario also reports what the machine did in its measured step
// (usage.go): the CPU seconds of the controller processes, the broker
// processes and the bench process itself (cpu.go), and the scheduling gaps
// a goroutine of the bench saw (gaps.go), so that a reader tells a stall of
// the machine from Keel's own time. Each report checks the scenarios'
// targets (targets.go).
package bench
