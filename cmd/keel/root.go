package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/cmd/keel/internal/config"
	"github.com/keel-dev/keel/tlsauth"
)

// globalFlags are shared by every subcommand.
type globalFlags struct {
	logLevel  string
	logFormat string

	configPath    string         // --config
	configFile    string         // the file read: --config's or KEEL_CONFIG's
	configSources config.Sources // where each flag's value came from
	process       string         // the process the command runs (envProcess); "" for the CLI
	ignoredEnv    []config.Ignored
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "keel",
		Short:         "Keel: a Raft-native controller quorum for a cluster of brokers",
		Version:       buildVersion(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return g.applyConfig(cmd)
		},
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	root.PersistentFlags().String(flagTLSCert, "", "this process's certificate (PEM) for mutual TLS, with --tls-key and --tls-ca; empty: plaintext")
	root.PersistentFlags().String(flagTLSKey, "", "the private key (PEM) of --tls-cert")
	root.PersistentFlags().String(flagTLSCA, "", "the CA certificate (PEM) every peer's certificate must be signed by")
	root.PersistentFlags().StringVar(&g.configPath, flagConfig, "",
		"read settings from this YAML file; flags and KEEL_* variables win over it (env KEEL_CONFIG; keel controller's KEEL_CONTROLLER_CONFIG, and so on)")
	root.AddCommand(withPrintConfig(g, newControllerCmd(g)), withPrintConfig(g, newBrokerCmd(g)),
		withPrintConfig(g, newDevCmd(g)), newQuorumCmd())
	root.AddCommand(newTopicCmd(), newPartitionCmd(), newConfigCmd(), newFeaturesCmd(), newACLCmd())
	root.AddCommand(newProduceCmd(), newConsumeCmd(), newGroupCmd())
	root.AddCommand(newSnapshotCmd())
	root.AddCommand(newCertCmd())
	root.AddCommand(newUserCmd())
	root.AddCommand(newMetadataCmd())
	root.AddCommand(newBenchCmd(g), newBenchSinkCmd()) // bench-sink: hidden
	root.AddCommand(newVersionCmd())
	root.AddCommand(newDocsCmd()) // hidden: make docs
	return root
}

// The mutual TLS flags, on every command (README: Security).
const (
	flagTLSCert = "tls-cert"
	flagTLSKey  = "tls-key"
	flagTLSCA   = "tls-ca"
)

// tlsFlags loads --tls-cert, --tls-key and --tls-ca as cmd sees them (they
// are the root's persistent flags): nil, plaintext, when none is given. A
// command built without the root, as in tests, has none.
func tlsFlags(cmd *cobra.Command) (*tlsauth.Config, error) {
	file := func(name string) tlsauth.File {
		f := cmd.Flags().Lookup(name)
		if f == nil {
			return tlsauth.File{}
		}
		return tlsauth.File{Path: f.Value.String(), From: valueFrom(config.SourceOf(f))}
	}
	return tlsauth.LoadFiles(file(flagTLSCert), file(flagTLSKey), file(flagTLSCA))
}

// valueFrom is how an error says where a value came from when it was not
// the command line: "env KEEL_BROKER_TLS_KEY", "--config FILE"; "" for the
// command line (the flag's name says it) or the default.
func valueFrom(s config.Source) string {
	switch s.Kind {
	case config.FromEnv:
		return "env " + s.Name
	case config.FromFile:
		return "--" + flagConfig + " " + s.Name
	}
	return ""
}

func tlsFlagValues(cmd *cobra.Command) (cert, key, ca string) {
	get := func(name string) string {
		if f := cmd.Flags().Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	return get(flagTLSCert), get(flagTLSKey), get(flagTLSCA)
}

// logger builds the process logger (stderr) from the global flags.
func (g *globalFlags) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	var l *slog.Logger
	switch strings.ToLower(g.logFormat) {
	case "text":
		l = slog.New(slog.NewTextHandler(os.Stderr, opts))
	case "json":
		l = slog.New(slog.NewJSONHandler(os.Stderr, opts))
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", g.logFormat)
	}
	// Whatever logs through slog's default or the standard library's log
	// package (net/http's TLS handshake errors, a library given no logger)
	// comes out in the same format and at the same level setting. Without
	// this, the standard log goes wherever a dependency's init sent it:
	// etcd's capnslog, linked in by raft-wal, rewrites it to its own
	// "I | ..." lines.
	slog.SetDefault(l)
	g.logIgnoredEnv(l)
	return l, nil
}

// logIgnoredEnv says, once, which of the CLI's variables a process ignored
// (applyConfig): the admin certificate exported for keel commands is not a
// controller's, and a setting that silently does nothing is worse.
func (g *globalFlags) logIgnoredEnv(l *slog.Logger) {
	if len(g.ignoredEnv) == 0 {
		return
	}
	ignored, instead := g.ignoredEnvNames()
	l.Info("ignoring the CLI's variables: keel "+g.process+" reads "+config.EnvPattern(g.process),
		"ignored", strings.Join(ignored, ","), "instead", strings.Join(instead, ","))
	g.ignoredEnv = nil
}

// ignoredEnvNames are the CLI's variables the process ignored, and the ones
// it reads instead, in one order.
func (g *globalFlags) ignoredEnvNames() (ignored, instead []string) {
	for _, v := range g.ignoredEnv {
		ignored, instead = append(ignored, v.Name), append(instead, v.Instead)
	}
	return ignored, instead
}

// ignoredEnvNote is logIgnoredEnv's message in a few words, for an error
// line: "ignored the CLI's KEEL_TLS_CERT: keel controller reads
// KEEL_CONTROLLER_TLS_CERT".
func (g *globalFlags) ignoredEnvNote() string {
	ignored, instead := g.ignoredEnvNames()
	return fmt.Sprintf("ignored the CLI's %s: keel %s reads %s", strings.Join(ignored, ", "), g.process, strings.Join(instead, ", "))
}
