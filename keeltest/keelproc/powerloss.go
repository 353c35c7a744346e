package keelproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/keel-dev/keel/broker/partlog"
)

// LogCut is what a power loss took from one replica log.
type LogCut struct {
	Broker int32
	// Dir is the replica log's directory (DATA_DIR/logs/TOPICID-PARTITION).
	Dir string
	// Before and After are its log end offsets before the cut and after.
	Before, After int64
}

// PowerLoss emulates a power loss of each of the brokers nodes, the worst
// one for their data: each is killed (SIGKILL, every signal before any
// wait, as Kill), then every replica log in its data dir (DATA_DIR/logs/*,
// broker/replication's layout) is cut back to what its last fsync holds
// (partlog.DropUnsynced: the recovery point). The brokers do not fsync
// each write (Kafka's default; --log-flush-interval changes it), so a
// power loss may take everything since a log's last roll or flush, while a
// kill -9 takes nothing (the page cache survives the process). The other
// files of the data dir stay: checkpoints and meta.json are fsynced when
// written, and a killed broker leaves no clean-shutdown marker, so its next
// start reports an unclean shutdown (KIP-966). Start a broker again with
// StartNodes.
//
// It returns each log's cut, in broker and directory order. It fails for a
// node that is not a broker or not running (after killing the others), and
// for a log it could not cut, which it names.
func (c *Cluster) PowerLoss(nodes ...*Node) ([]LogCut, error) {
	var errs []error
	var brokers []*Node
	for _, nd := range nodes {
		if nd.role != brokerRole {
			errs = append(errs, fmt.Errorf("power loss of %s: only a broker's logs can be cut", nd.name))
			continue
		}
		brokers = append(brokers, nd)
	}
	exited, kerrs := c.signalAndWait("power loss of", syscall.SIGKILL, "SIGKILL", brokers)
	errs = append(errs, kerrs...)
	var cuts []LogCut
	for _, nd := range exited {
		dirs, err := filepath.Glob(filepath.Join(nd.dataDir, "logs", "*"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, dir := range dirs {
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				continue
			}
			before, after, err := partlog.DropUnsynced(dir)
			if err != nil {
				errs = append(errs, fmt.Errorf("power loss of %s: %w", nd.name, err))
				continue
			}
			cuts = append(cuts, LogCut{Broker: nd.id, Dir: dir, Before: before, After: after})
		}
	}
	return cuts, errors.Join(errs...)
}
