package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keel-dev/keel/cmd/keel/internal/config"
)

// The configuration flags (README: Configuration): --config on the root,
// --print-config on the commands that run a process.
const (
	flagConfig      = "config"
	flagPrintConfig = "print-config"
)

// applyConfig is the root's PersistentPreRunE: it fills every flag of cmd
// that the command line left alone from its variable (KEEL_<FLAG> for the
// CLI, KEEL_<PROCESS>_<FLAG> for a command that runs a process), else from
// the --config file (or the variable's), and keeps where each value came
// from for --print-config and TLS errors. Cobra runs only the nearest
// PersistentPreRunE, so a subcommand that ever needs its own must call this
// one too.
func (g *globalFlags) applyConfig(cmd *cobra.Command) error {
	if !configurable(cmd) {
		return nil
	}
	process := envProcess(cmd)
	// The root's own flag, not cmd.Flags().Lookup: `keel topic create` has a
	// --config of its own (topic settings) that hides the root's.
	path, from := g.configPath, "--"+flagConfig
	if f := cmd.Root().PersistentFlags().Lookup(flagConfig); f == nil || !f.Changed {
		from = config.EnvName(process, flagConfig)
		path = os.Getenv(from)
	}
	var file *config.File
	if path != "" {
		var err error
		if file, err = config.Load(path); err != nil {
			return fmt.Errorf("%s: %w", from, err)
		}
	}
	markActions(cmd)
	src, err := config.Apply(cmd.CommandPath(), process, cmd.Flags(), os.LookupEnv, file)
	if err != nil {
		return err
	}
	g.configSources, g.configFile = src, path
	g.process, g.ignoredEnv = process, config.IgnoredEnv(process, cmd.Flags(), os.LookupEnv)
	return nil
}

// envProcess is the name of the process cmd runs ("controller"), whose
// variables are KEEL_CONTROLLER_<FLAG>; "" for the CLI, which reads
// KEEL_<FLAG>. The commands that run a process are those with
// --print-config.
func envProcess(cmd *cobra.Command) string {
	if cmd.Flags().Lookup(flagPrintConfig) == nil {
		return ""
	}
	return cmd.Name()
}

// connectionFlags are the flags of the commands that do not run a process
// (admin and offline tools) that are settings: where the cluster or the data
// is and how to talk to it (KEEL_CONTROLLERS, like etcdctl's
// ETCDCTL_ENDPOINTS; KEEL_BOOTSTRAP, the brokers' Kafka listeners; KEEL_CERTS_DIR,
// like COCKROACH_CERTS_DIR). Their other
// flags say what the command does.
var connectionFlags = map[string]bool{"controllers": true, "timeout": true, "output": true, "address": true, "data-dir": true,
	"certs-dir": true, "ca-key": true, "bootstrap": true}

// markActions annotates as config.NotASetting every local flag of a command
// that does not run a process (has no --print-config), except
// connectionFlags. The global flags stay settings everywhere.
func markActions(cmd *cobra.Command) {
	if cmd.Flags().Lookup(flagPrintConfig) != nil {
		return
	}
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if !connectionFlags[f.Name] {
			_ = cmd.Flags().SetAnnotation(f.Name, config.NotASetting, nil)
		}
	})
}

// configurable reports whether cmd takes settings: not cobra's own help and
// shell-completion commands, which must work whatever KEEL_CONFIG names.
func configurable(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		if c.Name() == "help" || c.Name() == "completion" || strings.HasPrefix(c.Name(), cobra.ShellCompRequestCmd) {
			return false
		}
	}
	return true
}

// withPrintConfig gives cmd, a command that runs a process, --print-config:
// print the effective settings as a --config file, and exit without
// starting anything.
func withPrintConfig(g *globalFlags, cmd *cobra.Command) *cobra.Command {
	var print bool
	cmd.Flags().BoolVar(&print, flagPrintConfig, false,
		"print the effective settings and their sources as a --config file, and exit")
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if print {
			return g.printConfig(cmd)
		}
		err := run(cmd, args)
		if err != nil && len(g.ignoredEnv) > 0 {
			// Refused before its logger said which variables it ignored
			// (logIgnoredEnv): the refusal may be about one of them.
			err = fmt.Errorf("%w (%s)", err, g.ignoredEnvNote())
		}
		return err
	}
	return cmd
}

// printConfig writes cmd's flags, then the global ones, with their values
// and where each came from.
func (g *globalFlags) printConfig(cmd *cobra.Command) error {
	header := fmt.Sprintf("%s: the effective settings (after each: flag, env %s, file or default).\n",
		cmd.CommandPath(), config.EnvPattern(envProcess(cmd)))
	for _, v := range g.ignoredEnv {
		header += fmt.Sprintf("Ignored %s, the CLI's: this command reads %s.\n", v.Name, v.Instead)
	}
	if g.configFile != "" {
		header += fmt.Sprintf("Read from %s. ", g.configFile)
	}
	header += fmt.Sprintf("Run with: %s --config FILE\n", cmd.CommandPath())
	return config.Write(cmd.OutOrStdout(), header, g.configSources, cmd.LocalFlags(), cmd.InheritedFlags())
}
