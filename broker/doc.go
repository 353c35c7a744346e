// Package broker is the broker side of Keel: the agent that a broker process
// runs to join a cluster and follow its metadata, and the contracts of the
// replicas the broker holds: with that agent (DataPlane, Link), and with the
// Kafka listener, broker/kafka (Backend).
//
// A broker never talks to raft. It registers with the active controller,
// heartbeats to keep its session (reporting the metadata offset it has
// applied, which is what the controller unfences it on), and holds one
// long-lived metadata stream to the active controller. The stream carries the
// committed record batches themselves, and the agent replays them with the
// same fsm.Apply the controllers use, so a broker's image at offset N is the
// controllers' image at offset N. Each applied batch is handed to a Handler,
// which is where a broker acts on what changed; the agent itself holds no
// broker logic, so anyone can build their own broker on it. `keel broker` is
// the reference broker. The registration, heartbeats, stream and controlled
// shutdown are a Session (session.go, stream.go), which the agent drives with
// its replay as the Follower, and each of the bench's thin brokers with a scan
// of the stream.
//
// From each applied batch the agent also derives what changed for this
// broker's replicas (DiffReplicas) and calls the handlers' BecomeLeader,
// BecomeFollower and StopReplica: the seeds' LeaderAndIsr and StopReplica
// requests, which no controller has to send and no broker can miss. The
// replicas themselves belong to a DataPlane; the reference broker's is
// broker/replication, a log per replica whose followers fetch from their
// leaders and whose leaders change ISRs through AlterPartition, as Kafka's do.
// Shutdown is KRaft's controlled shutdown: the broker asks to leave, keeps
// applying metadata while the controller moves its leaderships away, and
// goes once the controller says every broker has applied the moves and has
// fenced it. It stays registered, fenced, until its next start; removing it
// for good is an operator's act (keel broker unregister).
//
// The replay refuses anything that could make the image diverge: a push from
// a controller epoch lower than one already seen (a deposed controller), an
// entry that does not continue the applied offset (a gap), or a snapshot that
// does not verify. It drops the stream and resumes from its own offset, so
// after a failover the new active controller sends only what the broker is
// missing, never the whole image again.
//
// A broker whose process dies is fenced within the controllers'
// --crash-grace, on the end of its stream and a refused dial of its port; one
// whose links only broke must be back before then, so a stream that ends is
// opened again at once, then every 10-20 ms for 2 s while the attempts reach
// no controller (stream.go). A broker that stopped cleanly leaves a marker
// with its epoch in its data dir (shutdown_marker.go); one that did not
// reports an unclean shutdown at its next registration, and leaves its
// partitions' ISRs and ELRs (KIP-966). A data plane that keeps logs reports
// them (ReportReplicaLogs) for a partition that awaits its replicas' logs, or
// whose metadata went back (a restore), and the Kafka listener's requests for
// the controllers go through the agent's client (forward.go).
package broker
