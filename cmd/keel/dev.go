package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/raftlog"
	"github.com/keel-dev/keel/server"
)

func newDevCmd(g *globalFlags) *cobra.Command {
	var dataDir string
	var controllers int
	timing := raftlog.DefaultTiming()
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster in one process (temporary data; Ctrl-C stops it)",
		Long: `Run a local controller quorum in one process on free loopback ports, with its
data in a temporary directory that is removed on exit (or in --data-dir, kept).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if controllers != 1 && controllers != 3 && controllers != 5 {
				return fmt.Errorf("--controllers-count %d: want 1, 3 or 5", controllers)
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			if dataDir == "" {
				if dataDir, err = os.MkdirTemp("", "keel-dev-"); err != nil {
					return err
				}
				defer os.RemoveAll(dataDir)
			}
			q, err := server.StartLocalQuorum(controllers, dataDir, timing, buildVersion(), log)
			if err != nil {
				return err
			}
			addrs := q.Addrs()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Keel dev cluster: %d controllers, data in %s\n", controllers, dataDir)
			for i, addr := range addrs {
				fmt.Fprintf(out, "  controller %d  %s\n", i+1, addr)
			}
			fmt.Fprintf(out, "\nTry:\n  keel quorum status --controllers %s\n", strings.Join(addrs, ","))
			fmt.Fprintf(out, "  keel quorum verify --controllers %s\n\nCtrl-C stops the cluster.\n", strings.Join(addrs, ","))

			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			<-sigs
			fmt.Fprintln(out, "stopping...")
			return q.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "", "keep the cluster's data here instead of a temporary directory")
	f.IntVar(&controllers, "controllers-count", 3, "number of controllers: 1, 3 or 5")
	addRaftTimingFlags(f, &timing)
	return cmd
}
