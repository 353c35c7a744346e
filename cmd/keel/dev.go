package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
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
			// Bind every port first: the voter list needs them all.
			muxes := make([]*raftlog.Mux, controllers)
			voters := make([]raftlog.Voter, controllers)
			for i := range muxes {
				if muxes[i], err = raftlog.Listen("127.0.0.1:0"); err != nil {
					for _, m := range muxes[:i] {
						m.Close()
					}
					return err
				}
				voters[i] = raftlog.Voter{ID: int32(i + 1), Address: muxes[i].Addr().String()}
			}
			var nodes []*server.Controller
			stopAll := func() error {
				var errs []error
				for _, n := range nodes {
					errs = append(errs, n.Close())
				}
				return errors.Join(errs...)
			}
			for i, v := range voters {
				n, err := server.StartController(server.ControllerConfig{
					NodeID:  v.ID,
					DataDir: filepath.Join(dataDir, fmt.Sprintf("controller-%d", v.ID)),
					Voters:  voters,
					Timing:  timing,
					Version: buildVersion(),
					Logger:  log.With("node", v.ID),
					Mux:     muxes[i],
				})
				if err != nil {
					for _, m := range muxes[i:] {
						m.Close()
					}
					return errors.Join(err, stopAll())
				}
				nodes = append(nodes, n)
			}
			addrs := make([]string, len(voters))
			for i, v := range voters {
				addrs[i] = v.Address
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Keel dev cluster: %d controllers, data in %s\n", controllers, dataDir)
			for _, v := range voters {
				fmt.Fprintf(out, "  controller %d  %s\n", v.ID, v.Address)
			}
			fmt.Fprintf(out, "\nTry:\n  keel quorum status --controllers %s\n", strings.Join(addrs, ","))
			fmt.Fprintf(out, "  keel quorum verify --controllers %s\n\nCtrl-C stops the cluster.\n", strings.Join(addrs, ","))

			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			<-sigs
			fmt.Fprintln(out, "stopping...")
			return stopAll()
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "", "keep the cluster's data here instead of a temporary directory")
	f.IntVar(&controllers, "controllers-count", 3, "number of controllers: 1, 3 or 5")
	addRaftTimingFlags(f, &timing)
	return cmd
}
