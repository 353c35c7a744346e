package integration

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// The fault suite's disks: each controller's data dir on a small ext4 file
// system of its own, loop-mounted, that the nemesis fills up or turns
// read-only under the running node. They are real file systems, not an
// injected storage layer, so a fault reaches the node as it would in
// production: ENOSPC or EROFS from the kernel, wherever bbolt, raft's
// snapshot store or the meta file happens to write. This needs root, a loop
// device, mkfs.ext4 and e2fsck (CI runs as root on Debian); without them
// the disk faults are skipped, with the reason logged.

// diskSize is each controller's file system: room for a run's log and
// snapshots, small enough to fill in a moment.
const diskSize = 64 << 20

// disk is one loop-mounted ext4 file system.
type disk struct {
	image  string // the backing file
	mount  string // where it is mounted
	filler string // the file that fills it up (disk-full)
}

// dataDir is the controller's data dir on the disk.
func (d *disk) dataDir() string { return filepath.Join(d.mount, "data") }

var diskProbe struct {
	once     sync.Once
	reason   string // why disk faults are unavailable; "" if they are
	readOnly string // why the read-only fault is unavailable; "" if it is
}

// disksAvailable reports whether this machine can run the disk faults, and
// if not, why: it makes, mounts and unmounts a small file system once.
func disksAvailable() (full, readOnly string) {
	diskProbe.once.Do(func() {
		if os.Geteuid() != 0 {
			diskProbe.reason = "not root: mounting a file system needs root"
			return
		}
		for _, tool := range []string{"mkfs.ext4", "e2fsck", "mount", "umount"} {
			if _, err := exec.LookPath(tool); err != nil {
				diskProbe.reason = fmt.Sprintf("no %s: %v", tool, err)
				return
			}
		}
		dir, err := os.MkdirTemp("", "keel-disk-probe-")
		if err != nil {
			diskProbe.reason = err.Error()
			return
		}
		defer os.RemoveAll(dir)
		d, err := makeDisk(dir, "probe")
		if err != nil {
			diskProbe.reason = err.Error()
			return
		}
		if _, err := os.Stat(d.errorTrigger()); err != nil {
			diskProbe.readOnly = fmt.Sprintf("ext4 has no %s to turn a file system read-only: %v", d.errorTrigger(), err)
		}
		if err := d.unmount(); err != nil {
			diskProbe.reason = err.Error()
		}
	})
	if diskProbe.reason != "" {
		return diskProbe.reason, diskProbe.reason
	}
	return "", diskProbe.readOnly
}

// makeDisk creates dir/name.img, makes an ext4 file system in it (no blocks
// reserved for root: the nodes run as root, and so does the filler) and
// mounts it on dir/name, remounting read-only on an error, as ext4 is
// usually mounted.
func makeDisk(dir, name string) (*disk, error) {
	d := &disk{
		image:  filepath.Join(dir, name+".img"),
		mount:  filepath.Join(dir, name),
		filler: filepath.Join(dir, name, "filler"),
	}
	f, err := os.Create(d.image)
	if err != nil {
		return nil, err
	}
	err = f.Truncate(diskSize)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := run("mkfs.ext4", "-q", "-F", "-m", "0", d.image); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(d.mount, 0o700); err != nil {
		return nil, err
	}
	if err := d.mountIt(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *disk) mountIt() error {
	return run("mount", "-o", "loop,errors=remount-ro", d.image, d.mount)
}

func (d *disk) unmount() error { return run("umount", d.mount) }

// device is the loop device the disk is mounted from ("loop3"), read from
// /proc/mounts.
func (d *disk) device() (string, error) {
	f, err := os.Open("/proc/mounts")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[1] == d.mount {
			return filepath.Base(fields[0]), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s is not mounted", d.mount)
}

// errorTrigger is ext4's sysfs file that reports an error on the file
// system as if ext4 had found one, which with errors=remount-ro turns it
// read-only at once, open files and all (a remount would refuse: files are
// open for writing).
func (d *disk) errorTrigger() string {
	dev, err := d.device()
	if err != nil {
		return "/sys/fs/ext4/(unmounted)/trigger_fs_error"
	}
	return filepath.Join("/sys/fs/ext4", dev, "trigger_fs_error")
}

// fill writes a file beside the data dir until the file system has no
// space left.
func (d *disk) fill() error {
	f, err := os.OpenFile(d.filler, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for len(buf) > 0 {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				return err
			}
			buf = buf[:len(buf)/2] // fill what is left in smaller pieces
		}
	}
	return f.Sync()
}

// unfill removes the filler, durably: were the disk to turn read-only
// before ext4 commits the removal (every 5 s), the check that repairs it
// would bring the filler back.
func (d *disk) unfill() error {
	err := os.Remove(d.filler)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	dir, err := os.Open(d.mount)
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}

// turnReadOnly makes ext4 turn the file system read-only, as it does when
// it finds an error (errors=remount-ro).
func (d *disk) turnReadOnly() error {
	return os.WriteFile(d.errorTrigger(), []byte("keel fault suite: read-only disk\n"), 0o200)
}

// repair unmounts the disk, checks it (e2fsck replays the journal ext4
// aborted when it turned read-only) and mounts it again, writable. The
// node on it must have stopped.
func (d *disk) repair() error {
	if err := d.unmount(); err != nil {
		return err
	}
	// e2fsck exits 1 or 2 when it corrected errors (the one the trigger
	// recorded), 4 and up when it could not.
	if err := run("e2fsck", "-f", "-y", d.image); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() >= 4 {
			return err
		}
	}
	return d.mountIt()
}

// disks gives each controller (or broker) of a fault run a disk, and unmounts them
// when the test ends, after its processes have stopped (so it must be
// called before startCluster).
type disks map[int32]*disk

func newDisks(t *testing.T, role string, ids ...int32) disks {
	t.Helper()
	dir := t.TempDir()
	ds := disks{}
	t.Cleanup(func() {
		for _, d := range ds {
			if err := d.unmount(); err != nil {
				t.Errorf("unmount %s: %v", d.mount, err)
			}
		}
	})
	for _, id := range ids {
		d, err := makeDisk(dir, fmt.Sprintf("%s-%d", role, id))
		if err != nil {
			t.Fatal(err)
		}
		ds[id] = d
	}
	return ds
}

// dataDir is node id's data dir (keelproc.Config.ControllerDataDir, BrokerDataDir).
func (ds disks) dataDir(id int32) string { return ds[id].dataDir() }

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
