package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/cmd/keel/internal/bench"
)

func newBenchCmd(g *globalFlags) *cobra.Command {
	var (
		scenarios, controllers, output, cpuProfile string
		cfg                                        bench.Config
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark a controller quorum with simulated brokers over real gRPC",
		Long: `Start a real 3-controller quorum on loopback (keel controller processes with
temporary data), or use a running one (--controllers), attach simulated brokers
over real gRPC, run named scenarios and print the median and max of each over
--runs runs.

Scenarios (in the order they run):
  create               P partitions (RF 3) in topics of 10,000: partitions committed
                       per second, and the time until every broker has them
  heartbeats           heartbeat latency p50/p99 of the brokers at the default 2s interval
  broker-failure       the broker leading the most partitions falls silent (its
                       connections stay open): from its fencing, a session timeout
                       later, until every live broker has the new leaders
  broker-crash         the same kind of broker is killed (its connections close): from
                       the kill until every live broker has the new leaders
  controlled-shutdown  the same kind of broker shuts down cleanly: until it may exit
  failover             kill -9 of the active controller: until a new one is active,
                       and every broker streams from it again
  load                 kill -9 of every controller after a raft snapshot of the P
                       partitions: time until ready again, and heap per partition
  steady               only when named: --steady-duration (10m) of heartbeats and a
                       write every 50ms; the active controller must never change

The data path's scenarios run only when named, on a cluster of their own: three
controllers and three keel broker processes with Kafka listeners (started from
this keel binary), written to by franz-go producers in the bench process:
  produce              throughput of --record-size records with acks=1 and acks=all
                       (--producers clients, --produce-partitions partitions, RF 3),
                       against the ceiling of RF 3 on this machine measured in the
                       same run (the lower of a third of one partition log's append
                       rate and a third of the loopback bandwidth between two
                       processes); acks=all latency p50/p99 at half its peak rate
  leader-crash         kill -9 of a partition's leader under a steady acks=all
                       producer: until the first write acknowledged by the new
                       leader, and the writes that failed or were retried
  catch-up             a follower restarted after --catch-up-bytes were written
                       without it: until it is back in every ISR
  consume-group        --group-records records read by a consumer group of 3 that
                       commits them (records/s against one consumer without a
                       group), then the rebalance when a 4th member joins (until
                       every partition is assigned again) and when it leaves

Brokers are full (an in-process broker agent replaying the whole image) or thin
(registration, heartbeats, the metadata stream and offset acknowledgements,
no image). The raw hashicorp/raft commit rate on the same records, measured in
the same run, is what the create scenario's records/s is held to: one entry at a
time (raft_one_at_a_time_ratio); pipelined (raft_pipelined_ratio) for reference.

Every scenario also reports the CPU seconds the controller and broker processes
and the bench process used in its measured step (cpu_*_s; create per partition,
produce per GB acknowledged), and the scheduling gaps a goroutine of the bench
saw meanwhile (gap_*), beside 2s of them idle before the first scenario: a
stall of the machine shows in them, Keel's own time does not. The report ends
with the targets each scenario met or missed.

The defaults run in minutes on two cores; the headline run is
--partitions 1000000. Against a running quorum (--controllers) the scenarios
that kill controllers (failover, load) are skipped, and the bench's topics and
brokers are removed at the end. A running quorum with mutual TLS is reached with
--tls-cert, --tls-key and --tls-ca naming an admin certificate, which every
simulated broker presents too.`,
		Example: `  keel bench
  keel bench --partitions 1000000 --scenarios create,load,broker-failure,controlled-shutdown --runs 1
  keel bench --controllers 127.0.0.1:9192,127.0.0.1:9193,127.0.0.1:9194 --scenarios create,heartbeats -o json
  keel bench --scenarios produce,leader-crash,catch-up -o json
  keel bench --scenarios consume-group --runs 5`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			list, err := bench.ParseScenarios(scenarios)
			if err != nil {
				return err
			}
			cfg.Scenarios = list
			if cfg.TLS, err = tlsFlags(cmd); err != nil {
				return err
			}
			cfg.Controllers = splitAddrs(controllers)
			if len(cfg.Controllers) == 0 {
				if cfg.Executable, err = os.Executable(); err != nil {
					return fmt.Errorf("find the keel executable to start controllers with: %v", err)
				}
			}
			stderr := cmd.ErrOrStderr()
			cfg.Status = stderr
			if isTerminal(stderr) {
				cfg.Progress = stderr
			}
			// The brokers' own logs only at debug level: a hundred brokers
			// logging at info would bury the progress.
			if strings.EqualFold(g.logLevel, "debug") {
				if cfg.Logger, err = g.logger(); err != nil {
					return err
				}
			} else {
				cfg.Logger = slog.New(slog.DiscardHandler)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %v", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %v", err)
				}
				defer pprof.StopCPUProfile()
			}
			report, err := bench.Run(ctx, cfg)
			if err != nil {
				return err
			}
			return printAs(cmd.OutOrStdout(), output, report, printBenchTable)
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenarios, "scenarios", "all", "scenarios to run, comma-separated: "+strings.Join(bench.AllScenarios, ","))
	f.IntVar(&cfg.Partitions, "partitions", bench.DefaultPartitions, "partitions to create and load, P (the headline run is 1000000)")
	f.IntVar(&cfg.Brokers, "brokers", bench.DefaultBrokers, "simulated brokers, B")
	f.IntVar(&cfg.FullBrokers, "full-brokers", bench.DefaultFullBrokers, "how many of the brokers are full (replay the whole image); the rest are thin")
	f.IntVar(&cfg.Runs, "runs", bench.DefaultRuns, "runs of each scenario (median and max are over them)")
	f.StringVar(&controllers, "controllers", "", "bench a running quorum at host:port,... instead of starting one (skips failover and load)")
	f.StringVarP(&output, "output", "o", "table", "output format: table or json")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process (not the controllers) to this file")
	f.DurationVar(&cfg.HeartbeatWindow, "heartbeat-window", bench.DefaultHeartbeatWindow, "how long each heartbeats run measures")
	f.DurationVar(&cfg.SteadyDuration, "steady-duration", bench.DefaultSteadyDuration, "how long each run of the steady scenario (named only explicitly) lasts")
	addBenchDataFlags(f, &cfg.Data)
	return cmd
}

// isTerminal reports whether w is a terminal (progress bars go only there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// printBenchTable prints one row per scenario, each scenario's own figures
// under the table, and the raw raft ceiling.
func printBenchTable(w io.Writer, r *bench.Report) error {
	rows := [][]string{{"SCENARIO", "PARTITIONS", "BROKERS", "RUNS", "MEDIAN", "MAX", "MEASURES"}}
	for _, s := range r.Scenarios {
		rows = append(rows, []string{s.Name, fmt.Sprint(s.Partitions), fmt.Sprint(s.Brokers), fmt.Sprint(s.Runs),
			bench.FormatSeconds(s.MedianS), bench.FormatSeconds(s.MaxS), s.Measures})
	}
	if len(r.Scenarios) > 0 {
		if err := printTable(w, rows); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	for _, s := range r.Scenarios {
		var figs []string
		for _, f := range s.Extra {
			figs = append(figs, f.Name+"="+formatFigure(f))
		}
		fmt.Fprintf(w, "%s: %s\n", s.Name, strings.Join(figs, " "))
	}
	if r.RaftCeilingRecordsPerS > 0 { // not measured for the data path's scenarios alone
		fmt.Fprintf(w, "raw hashicorp/raft ceiling (3 nodes in process, %d-record entries): %.0f records/s one entry at a time, %.0f records/s pipelined\n",
			bench.CeilingRecordsPerEntry, r.RaftCeilingRecordsPerS, r.RaftPipelinedRecordsPerS)
	}
	fmt.Fprintf(w, "the machine idle before the bench: scheduling gaps max %.2fms, p99 %.2fms, %d above 10ms\n",
		r.IdleGapMaxMs, r.IdleGapP99Ms, r.IdleGapsOver10ms)
	for _, t := range r.Targets {
		met := "not met"
		if t.Met {
			met = "met"
		}
		fmt.Fprintf(w, "target %s (%d partitions, %d brokers): %s: %s\n", t.Scenario, t.Partitions, t.Brokers, t.Target, met)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "skipped %s: %s\n", s.Name, s.Reason)
	}
	return nil
}

func formatFigure(f bench.Figure) string {
	switch {
	case strings.HasSuffix(f.Name, "_per_s"):
		return fmt.Sprintf("%.0f/s", f.Value)
	case strings.HasSuffix(f.Name, "_ms"):
		return fmt.Sprintf("%.2fms", f.Value)
	case strings.HasSuffix(f.Name, "_s"):
		return bench.FormatSeconds(f.Value)
	case strings.HasSuffix(f.Name, "_bytes"):
		return fmt.Sprintf("%.1fMiB", f.Value/(1<<20))
	case f.Value == float64(int64(f.Value)):
		return fmt.Sprint(int64(f.Value))
	case f.Value >= 100:
		return fmt.Sprintf("%.0f", f.Value)
	}
	return fmt.Sprintf("%.3g", f.Value)
}
