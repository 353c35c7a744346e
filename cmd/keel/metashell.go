package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/server"
)

// The metadata shell is Kafka's kafka-metadata-shell for Keel: the image a
// stopped controller's snapshot and log add up to (or a snapshot file's),
// as a tree of directories and files to ls, cd, cat, tree and find.

func newMetadataShellCmd() *cobra.Command {
	var dataDir, snapshot, controllers string
	timeout := defaultSnapshotTimeout
	cmd := &cobra.Command{
		Use:   "shell (--data-dir DIR | --snapshot FILE | --controllers ADDRS) [COMMAND [ARG...]]",
		Short: "Browse the metadata of a stopped controller, a snapshot file or a running cluster as a tree (ls, cd, cat, tree, find)",
		Long: `Browse the metadata image of a stopped controller's data dir (its latest
snapshot and every log entry after it), of a snapshot file (keel snapshot
save), or of a running cluster (--controllers, or KEEL_CONTROLLERS: a
consistent snapshot of the committed metadata, fetched from the active
controller as keel snapshot save does, into a temporary file removed on exit;
the index and term it was taken at go to stderr), as Kafka's metadata shell
does:

  /brokers/ID               a registered broker
  /controllers/ID           a registered controller: its address and the
                            metadata versions it supports
  /topics/NAME/id           a topic's id
  /topics/NAME/configs      its configs in effect, each with its source
  /topics/NAME/N            partition N: leader, epochs, replicas, ISR, ELR
  /configs/cluster          the cluster-wide defaults in effect
  /configs/topics/NAME      a topic's configs in effect
  /quorum/                  cluster id, controller epoch and leader, metadata
                            version, the raft index and term the image is at,
                            and the voters (from a data dir)

Commands: ls [PATH...], cd [PATH], pwd, cat PATH..., tree [PATH],
find [PATH], help, exit. Files print as JSON.

With a COMMAND on the command line, runs it and exits. Otherwise reads
commands from stdin, one per line, with a prompt when stdin is a terminal;
a failed command is reported on stderr and the shell goes on, then exits
non-zero at the end of a script.`,
		Example: `  keel metadata shell --data-dir /var/lib/keel/controller
  keel metadata shell --data-dir /var/lib/keel/controller cat /topics/orders/0
  keel metadata shell --snapshot backup.snap tree /brokers
  keel metadata shell --controllers 127.0.0.1:9093 ls /topics
  printf 'cd /topics/orders\nls\ncat 0\n' | keel metadata shell --snapshot backup.snap`,
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := shellSource(map[string]string{"data-dir": dataDir, "snapshot": snapshot, "controllers": controllers}, os.Getenv)
			if err != nil {
				return err
			}
			var st *shellState
			switch from {
			case "data-dir":
				st, err = loadDataDirImage(dataDir, cmd.ErrOrStderr())
			case "snapshot":
				st, err = loadSnapshotImage(snapshot)
			default:
				st, err = loadClusterImage(cmd, controllers, timeout)
			}
			if err != nil {
				return err
			}
			sh := &metaShell{root: st.tree(), cwd: "/", out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr()}
			if len(args) > 0 {
				if !sh.run(args) {
					return errShellFailed
				}
				return nil
			}
			return sh.loop(cmd.InOrStdin(), stdinIsTerminal(cmd.InOrStdin()))
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "a stopped controller's data dir")
	cmd.Flags().StringVar(&snapshot, "snapshot", "", "a snapshot file (keel snapshot save)")
	cmd.Flags().StringVar(&controllers, "controllers", "", "a running cluster's controller addresses, host:port,... (any one will do)")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "with --controllers, how long to keep trying to fetch the snapshot")
	// Everything after the flags is the command for the shell, flags too.
	cmd.Flags().SetInterspersed(false)
	return cmd
}

// shellSource picks which of the shell's sources (flag name to value) it
// opens: the one given on the command line, else the one a KEEL_*
// variable gave, so that KEEL_CONTROLLERS exported for the admin commands
// does not stand in the way of --data-dir. A value equal to its variable's
// counts as the variable's. Two on the same footing are refused.
func shellSource(values map[string]string, getenv func(string) string) (string, error) {
	var typed, fromEnv []string
	for _, name := range []string{"data-dir", "snapshot", "controllers"} {
		v := values[name]
		switch {
		case v == "":
		case v == getenv("KEEL_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))):
			fromEnv = append(fromEnv, name)
		default:
			typed = append(typed, name)
		}
	}
	pick := typed
	if len(pick) == 0 {
		pick = fromEnv
	}
	if len(pick) != 1 {
		return "", errors.New("give --data-dir DIR (a stopped controller's), --snapshot FILE or --controllers ADDRS (a running cluster), one of them")
	}
	return pick[0], nil
}

// loadClusterImage fetches a consistent snapshot of the committed
// metadata from the active controller of controllers, as `keel snapshot
// save` does, into a temporary file it removes, and says on stderr at
// which index and term it was taken.
func loadClusterImage(cmd *cobra.Command, controllers string, timeout time.Duration) (*shellState, error) {
	if err := checkTimeout(timeout); err != nil {
		return nil, err
	}
	tlsCfg, err := tlsFlags(cmd)
	if err != nil {
		return nil, err
	}
	c, err := openAdmin(&adminFlags{controllers: controllers}, tlsCfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// The snapshot holds what `snapshot save`'s file does (SCRAM
	// credentials among it): a private directory (0700, the file 0600),
	// removed once the image is read, and on Ctrl-C during the fetch.
	dir, err := os.MkdirTemp("", "keel-metadata-shell-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ctx, stop := interrupted(cmd.Context())
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	file := filepath.Join(dir, "metadata.snap")
	sum, err := saveSnapshot(ctx, c, file)
	if err != nil {
		return nil, fmt.Errorf("fetch a snapshot from %s: %s", controllers, errorLine(err))
	}
	st, err := loadSnapshotImage(file)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "the committed metadata of cluster %s at index %d, term %d (from the active controller)\n", sum.ClusterID, sum.Index, sum.Term)
	return st, nil
}

// errShellFailed ends a shell run in which a command failed: each failure
// was reported as it happened.
var errShellFailed = errors.New("a command failed: see above")

// shellState is what the shell browses: an image, and what raft knew.
type shellState struct {
	img    *fsm.Image
	voters []raft.Server // nil: not known (a snapshot file has none)
}

// loadDataDirImage replays a stopped controller's latest snapshot and its
// log after it into an image, as the controller would on start. A batch
// the state machine refuses is skipped, as the controller skipped it; an
// entry that does not decode, or a damaged snapshot, is refused.
func loadDataDirImage(dataDir string, warn io.Writer) (*shellState, error) {
	r, err := raftlog.OpenReadOnly(dataDir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	st := &shellState{img: fsm.Empty()}
	var after uint64
	meta, rc, err := r.LatestSnapshot()
	if err != nil {
		return nil, err
	}
	if meta != nil {
		img, err := fsm.ReadSnapshot(rc)
		_ = rc.Close()
		if err != nil {
			return nil, fmt.Errorf("snapshot %s in %s: %v", meta.ID, dataDir, err)
		}
		st.img, after = img, meta.Index
		st.voters = meta.Configuration.Servers
	}
	err = r.Entries(after+1, func(index, term uint64, typ raft.LogType, data []byte) error {
		switch typ {
		case raft.LogConfiguration:
			st.voters = raft.DecodeConfiguration(data).Servers
		case raft.LogCommand:
			batch, err := fsm.DecodeBatch(data)
			if err != nil {
				return fmt.Errorf("log entry %d in %s: %v", index, dataDir, err)
			}
			img, err := fsm.Apply(st.img, index, term, batch)
			if err != nil {
				fmt.Fprintf(warn, "warning: log entry %d was refused by the state machine, as on the controller: %v\n", index, err)
				return nil
			}
			st.img = img
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

func loadSnapshotImage(file string) (*shellState, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	img, err := fsm.ReadSnapshot(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	return &shellState{img: img}, nil
}

// vnode is a directory (children) or a file (content) of the tree. Both
// are computed when asked for, so a million partitions cost nothing until
// someone lists them.
type vnode struct {
	children func() []namedNode
	content  func() any
}

type namedNode struct {
	name string
	node *vnode
}

func (n *vnode) isDir() bool { return n.children != nil }

func dir(children func() []namedNode) *vnode { return &vnode{children: children} }
func file(content func() any) *vnode         { return &vnode{content: content} }

func (n *vnode) child(name string) *vnode {
	for _, c := range n.children() {
		if c.name == name {
			return c.node
		}
	}
	return nil
}

// brokerFile is /brokers/ID.
type brokerFile struct {
	ID                 int32  `json:"id"`
	Epoch              int64  `json:"epoch"`
	IncarnationID      string `json:"incarnation_id"`
	Address            string `json:"address"`
	Rack               string `json:"rack"`
	State              string `json:"state"`
	MinMetadataVersion uint32 `json:"min_metadata_version"`
	MaxMetadataVersion uint32 `json:"max_metadata_version"`
}

// controllerFile is /controllers/ID.
type controllerFile struct {
	ID                 int32  `json:"id"`
	Address            string `json:"address"`
	MinMetadataVersion uint32 `json:"min_metadata_version"`
	MaxMetadataVersion uint32 `json:"max_metadata_version"`
}

// quorumVoter is one entry of /quorum/voters.
type quorumVoter struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"`
}

func (st *shellState) tree() *vnode {
	img := st.img
	brokers := dir(func() []namedNode {
		var out []namedNode
		for _, b := range img.Brokers() {
			out = append(out, namedNode{strconv.Itoa(int(b.ID)), file(func() any {
				return brokerFile{ID: b.ID, Epoch: b.Epoch, IncarnationID: b.IncarnationID, Address: b.Address, Rack: b.Rack,
					State: b.State(), MinMetadataVersion: b.MinMetadataVersion, MaxMetadataVersion: b.MaxMetadataVersion}
			})})
		}
		return out
	})
	controllers := dir(func() []namedNode {
		var out []namedNode
		for _, c := range img.Controllers() {
			out = append(out, namedNode{strconv.Itoa(int(c.NodeID)), file(func() any {
				return controllerFile{ID: c.NodeID, Address: c.Address, MinMetadataVersion: c.MinMetadataVersion, MaxMetadataVersion: c.MaxMetadataVersion}
			})})
		}
		return out
	})
	// A topic's configs in effect, each with its source, as topic describe
	// shows them.
	configsOf := func(t *fsm.Topic) []configRow {
		return describeView(&keelpb.TopicDescription{EffectiveConfigs: server.DescribeTopic(img, t).GetEffectiveConfigs()}).EffectiveConfigs
	}
	topics := dir(func() []namedNode {
		var out []namedNode
		for _, t := range img.Topics() {
			// Described once, when a partition of it is first read.
			view := sync.OnceValue(func() topicView { return describeView(server.DescribeTopic(img, t)) })
			out = append(out, namedNode{t.Name, dir(func() []namedNode {
				nodes := []namedNode{
					{"configs", file(func() any { return configsOf(t) })},
					{"id", file(func() any { return t.ID.String() })},
				}
				for i, p := range img.Partitions(t.ID) {
					nodes = append(nodes, namedNode{strconv.Itoa(int(p.Partition)), file(func() any { return view().Partitions[i] })})
				}
				return nodes
			})})
		}
		return out
	})
	configs := dir(func() []namedNode {
		return []namedNode{
			{"cluster", file(func() any {
				d := img.ClusterDefaults()
				rows := make([]configRow, len(d))
				for i, c := range d {
					rows[i] = configRow{Name: c.Name, Value: c.Value, Source: c.Source.String()}
				}
				return rows
			})},
			{"topics", dir(func() []namedNode {
				var out []namedNode
				for _, t := range img.Topics() {
					out = append(out, namedNode{t.Name, file(func() any { return configsOf(t) })})
				}
				return out
			})},
		}
	})
	// Each entity's client quotas, named as Kafka's tools name it, a '/'
	// in a name escaped as %2F.
	clientQuotas := dir(func() []namedNode {
		var out []namedNode
		for _, q := range img.ClientQuotas() {
			out = append(out, namedNode{strings.ReplaceAll(q.Entity.String(), "/", "%2F"), file(func() any { return q.Values })})
		}
		return out
	})
	quorum := dir(func() []namedNode {
		nodes := []namedNode{
			{"active_controller", file(func() any { return img.ControllerLeaderID })},
			{"cluster_id", file(func() any { return img.ClusterID })},
			{"controller_epoch", file(func() any { return img.ControllerEpoch })},
			{"metadata_version", file(func() any { return img.MetadataVersion })},
			{"offset", file(func() any { return img.Offset })},
			{"term", file(func() any { return img.Term })},
		}
		if st.voters != nil {
			nodes = append(nodes, namedNode{"voters", file(func() any {
				out := make([]quorumVoter, 0, len(st.voters))
				for _, s := range st.voters {
					out = append(out, quorumVoter{ID: string(s.ID), Address: string(s.Address), Suffrage: strings.ToLower(s.Suffrage.String())})
				}
				return out
			})})
		}
		return nodes
	})
	return dir(func() []namedNode {
		acls := file(func() any {
			out := []aclJSON{}
			for _, a := range img.ACLs() {
				out = append(out, aclOf(a.Binding))
			}
			return out
		})
		return []namedNode{{"acls", acls}, {"brokers", brokers}, {"client_quotas", clientQuotas}, {"configs", configs}, {"controllers", controllers},
			{"quorum", quorum}, {"topics", topics}, {"users", scramUsersDir(img)}}
	})
}

// metaShell runs the shell's commands against a tree.
type metaShell struct {
	root        *vnode
	cwd         string
	out, errOut io.Writer
}

// loop reads commands from in until its end or exit. It reports whether
// every command succeeded as a nil error.
func (sh *metaShell) loop(in io.Reader, interactive bool) error {
	sc := bufio.NewScanner(in)
	ok := true
	for {
		if interactive {
			fmt.Fprintf(sh.out, "keel:%s> ", sh.cwd)
		}
		if !sc.Scan() {
			break
		}
		args := strings.Fields(sc.Text())
		if len(args) == 0 || strings.HasPrefix(args[0], "#") {
			continue
		}
		if args[0] == "exit" || args[0] == "quit" {
			break
		}
		if !sh.run(args) {
			ok = false
		}
	}
	if interactive {
		fmt.Fprintln(sh.out)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !ok && !interactive {
		return errShellFailed
	}
	return nil
}

// run runs one command, reporting a failure on stderr: false if it failed.
func (sh *metaShell) run(args []string) bool {
	err := sh.exec(args[0], args[1:])
	if err != nil {
		fmt.Fprintf(sh.errOut, "%s: %v\n", args[0], err)
		return false
	}
	return true
}

func (sh *metaShell) exec(name string, args []string) error {
	switch name {
	case "pwd":
		fmt.Fprintln(sh.out, sh.cwd)
	case "cd":
		target := "/"
		if len(args) > 1 {
			return errors.New("want one path")
		}
		if len(args) == 1 {
			target = args[0]
		}
		p, n, err := sh.resolve(target)
		if err != nil {
			return err
		}
		if !n.isDir() {
			return fmt.Errorf("%s: not a directory", p)
		}
		sh.cwd = p
	case "ls":
		if len(args) == 0 {
			args = []string{"."}
		}
		for i, a := range args {
			p, n, err := sh.resolve(a)
			if err != nil {
				return err
			}
			if !n.isDir() {
				fmt.Fprintln(sh.out, path.Base(p))
				continue
			}
			if len(args) > 1 {
				if i > 0 {
					fmt.Fprintln(sh.out)
				}
				fmt.Fprintf(sh.out, "%s:\n", p)
			}
			for _, c := range n.children() {
				fmt.Fprintln(sh.out, c.name+slashIfDir(c.node))
			}
		}
	case "cat":
		if len(args) == 0 {
			return errors.New("want a path")
		}
		for _, a := range args {
			p, n, err := sh.resolve(a)
			if err != nil {
				return err
			}
			if n.isDir() {
				return fmt.Errorf("%s: is a directory", p)
			}
			if err := printJSON(sh.out, n.content()); err != nil {
				return err
			}
		}
	case "tree", "find":
		target := "."
		if len(args) > 1 {
			return errors.New("want one path")
		}
		if len(args) == 1 {
			target = args[0]
		}
		p, n, err := sh.resolve(target)
		if err != nil {
			return err
		}
		if name == "tree" {
			fmt.Fprintln(sh.out, p)
			sh.tree(n, "")
		} else {
			sh.find(p, n)
		}
	case "help":
		fmt.Fprintln(sh.out, `ls [PATH...]   list a directory ("/" ends a directory's name)
cd [PATH]      change directory (default /)
pwd            print the current directory
cat PATH...    print files, as JSON
tree [PATH]    print a directory's tree
find [PATH]    print every path under a directory
exit           leave`)
	default:
		return fmt.Errorf("unknown command (try help: ls, cd, pwd, cat, tree, find, exit)")
	}
	return nil
}

func slashIfDir(n *vnode) string {
	if n.isDir() {
		return "/"
	}
	return ""
}

func (sh *metaShell) tree(n *vnode, indent string) {
	children := n.children()
	for i, c := range children {
		branch, next := "├── ", "│   "
		if i == len(children)-1 {
			branch, next = "└── ", "    "
		}
		fmt.Fprintln(sh.out, indent+branch+c.name+slashIfDir(c.node))
		if c.node.isDir() {
			sh.tree(c.node, indent+next)
		}
	}
}

func (sh *metaShell) find(p string, n *vnode) {
	fmt.Fprintln(sh.out, p)
	if n.isDir() {
		for _, c := range n.children() {
			sh.find(path.Join(p, c.name), c.node)
		}
	}
}

// resolve turns a path, absolute or relative to the current directory,
// into its clean absolute form and its node.
func (sh *metaShell) resolve(p string) (string, *vnode, error) {
	if !strings.HasPrefix(p, "/") {
		p = path.Join(sh.cwd, p)
	}
	p = path.Clean(p)
	n := sh.root
	for _, part := range slices.DeleteFunc(strings.Split(p, "/"), func(s string) bool { return s == "" }) {
		if !n.isDir() {
			return "", nil, fmt.Errorf("%s: no such file or directory", p)
		}
		if n = n.child(part); n == nil {
			return "", nil, fmt.Errorf("%s: no such file or directory", p)
		}
	}
	return p, n, nil
}

// stdinIsTerminal reports whether r is a terminal, for the prompt.
func stdinIsTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// scramUsersDir is /users/NAME: a SCRAM user's mechanisms and iterations,
// never a salt or a key.
func scramUsersDir(img *fsm.Image) *vnode {
	return dir(func() []namedNode {
		byUser := map[string][]userRow{}
		var users []string
		for _, c := range img.ScramCredentials() {
			if byUser[c.User] == nil {
				users = append(users, c.User)
			}
			byUser[c.User] = append(byUser[c.User], userRow{User: c.User, Mechanism: fsm.ScramMechanismName(c.Mechanism), Iterations: c.Iterations})
		}
		out := make([]namedNode, 0, len(users))
		for _, u := range users {
			out = append(out, namedNode{u, file(func() any { return byUser[u] })})
		}
		return out
	})
}
