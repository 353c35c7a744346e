package broker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/keel-dev/keel/internal/atomicfile"
)

// cleanShutdownFile marks a data dir whose broker last stopped cleanly: its
// controlled shutdown over, its data plane closed (every log flushed). It
// holds the broker epoch of that incarnation. Kafka's LogManager keeps the
// same file (.kafka_cleanshutdown, KIP-966's broker epoch in it).
const cleanShutdownFile = "clean-shutdown"

// noPreviousEpoch is the previous_broker_epoch of a broker that did not
// stop cleanly, or never ran here (KIP-966's -1).
const noPreviousEpoch = -1

// takeCleanShutdown reads the marker of the last clean shutdown and removes
// it, so that a crash of this incarnation is never taken for a clean stop.
// It returns the epoch the marker holds, or noPreviousEpoch when there is
// none. A marker that cannot be read counts as none; one that cannot be
// removed fails the start (the next start would believe it).
func takeCleanShutdown(dir string) (int64, error) {
	path := filepath.Join(dir, cleanShutdownFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return noPreviousEpoch, nil
	}
	epoch := int64(noPreviousEpoch)
	if err == nil {
		if n, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); perr == nil && n > 0 {
			epoch = n
		}
	}
	if err := os.Remove(path); err != nil {
		return 0, fmt.Errorf("data dir %s: removing the clean shutdown marker: %v", dir, atomicfile.PathCause(err))
	}
	if err := syncDir(dir); err != nil {
		return 0, fmt.Errorf("data dir %s: %v", dir, err)
	}
	return epoch, nil
}

// markCleanShutdown writes the marker of a clean shutdown of the incarnation
// at epoch.
func markCleanShutdown(dir string, epoch int64) error {
	return atomicfile.Write(filepath.Join(dir, cleanShutdownFile), []byte(strconv.FormatInt(epoch, 10)+"\n"))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
