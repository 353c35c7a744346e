package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/internal/scram"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// defaultScramIterations is `keel user add`'s --iterations: twice Kafka's
// minimum (kafka-configs' default), within its 4096..16384. Only the
// client pays for them, once per login.
const defaultScramIterations = scram.DecoyIterations

// scramSaltSize is the size of the salts `keel user add` draws.
const scramSaltSize = 32

// maxPasswordLen bounds a password read from a file or stdin.
const maxPasswordLen = 1024

func newUserCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Manage the SASL/SCRAM users of the brokers' Kafka listeners",
		Long: `Add, list and remove the SCRAM credentials Kafka clients log in with on the
brokers' Kafka listeners (--kafka-sasl; SASL_SSL with TLS). A login's principal
is User:NAME. The log holds only the salted keys Kafka's KRaft holds: this
command salts the password locally, and the controllers derive the keys; no
password leaves this process, and none is ever stored. Kafka clients manage
the same credentials with AlterUserScramCredentials (kafka-configs
--alter --add-config 'SCRAM-SHA-512=[password=...]').`,
	}
	cmd.AddCommand(newUserAddCmd(), newUserListCmd(), newUserRemoveCmd())
	return cmd
}

// userResult is what `keel user add` and `remove` print.
type userResult struct {
	User      string `json:"user"`
	Mechanism string `json:"mechanism"`
	Action    string `json:"action"`
}

// mechanismFlag parses --mechanism.
func mechanismFlag(name string) (keelpb.ScramMechanism, scram.Mechanism, error) {
	m, ok := fsm.ScramMechanismByName(strings.ToUpper(name))
	if !ok {
		return 0, scram.Mechanism{}, fmt.Errorf("--mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", name)
	}
	sm, _ := scram.ByName(fsm.ScramMechanismName(m))
	return m, sm, nil
}

// readPassword reads the password: the file's first line, or stdin's.
func readPassword(cmd *cobra.Command, file string) (string, error) {
	var r io.Reader = cmd.InOrStdin()
	from := "stdin"
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("--password-file: %w", err)
		}
		defer f.Close()
		r, from = f, file
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256), maxPasswordLen+2)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return "", fmt.Errorf("read the password from %s: %w", from, err)
		}
		return "", fmt.Errorf("no password on %s", from)
	}
	pw := strings.TrimSuffix(sc.Text(), "\r")
	if pw == "" {
		return "", fmt.Errorf("the password from %s is empty", from)
	}
	return pw, nil
}

// alterUser sends req to the active controller and prints v, or the
// controller's refusal of the user as the command's error.
func alterUser(cmd *cobra.Command, a *adminFlags, req *keelpb.AlterUserScramCredentialsRequest, v userResult) error {
	return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (userResult, error) {
		resp, err := c.AlterUserScramCredentials(ctx, req)
		if err != nil {
			return userResult{}, err
		}
		for _, r := range resp.GetResults() {
			if r.GetError() != keelpb.ScramCredentialError_SCRAM_CREDENTIAL_ERROR_NONE {
				code := strings.TrimPrefix(r.GetError().String(), "SCRAM_CREDENTIAL_ERROR_")
				return v, fmt.Errorf("user %q: %s: %s", r.GetUser(), code, r.GetMessage())
			}
		}
		return v, nil
	}, printUserResult)
}

func printUserResult(w io.Writer, v userResult) error {
	_, err := fmt.Fprintf(w, "%s %s (%s)\n", v.Action, v.User, v.Mechanism)
	return err
}

func newUserAddCmd() *cobra.Command {
	a := &adminFlags{}
	var mechanism, passwordFile string
	var iterations int32
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Add a SCRAM user, or change its password",
		Long: `Set NAME's SCRAM credential for --mechanism, with the password read from
--password-file (its first line) or, without it, from stdin: never from a flag,
where other users would see it. A second add changes the password.`,
		Example: `  keel user add app-orders --password-file /run/secrets/app-orders
  printf '%s\n' "$PASSWORD" | keel user add app-orders --mechanism SCRAM-SHA-256`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, sm, err := mechanismFlag(mechanism)
			if err != nil {
				return err
			}
			if iterations < fsm.MinScramIterations || iterations > fsm.MaxScramIterations {
				return fmt.Errorf("--iterations %d: want %d to %d", iterations, fsm.MinScramIterations, fsm.MaxScramIterations)
			}
			pw, err := readPassword(cmd, passwordFile)
			if err != nil {
				return err
			}
			salt := make([]byte, scramSaltSize)
			if _, err := rand.Read(salt); err != nil {
				return err
			}
			salted, err := sm.SaltedPassword(pw, salt, int(iterations))
			if err != nil {
				return err
			}
			req := &keelpb.AlterUserScramCredentialsRequest{Upsertions: []*keelpb.ScramCredentialUpsertion{
				{Name: args[0], Mechanism: m, Iterations: iterations, Salt: salt, SaltedPassword: salted}}}
			return alterUser(cmd, a, req, userResult{User: args[0], Mechanism: sm.Name, Action: "set"})
		},
	}
	a.add(cmd)
	f := cmd.Flags()
	f.StringVar(&mechanism, "mechanism", scram.SHA512.Name, "SCRAM-SHA-512 or SCRAM-SHA-256")
	f.Int32Var(&iterations, "iterations", defaultScramIterations, "the SCRAM iterations, 4096 to 16384 (Kafka's bounds)")
	f.StringVar(&passwordFile, "password-file", "", "read the password from this file's first line (default: stdin)")
	return cmd
}

func newUserRemoveCmd() *cobra.Command {
	a := &adminFlags{}
	var mechanism string
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a SCRAM user's credential",
		Long: `Remove NAME's credential for --mechanism. Its connections already logged in
stay so; no new login with it succeeds once each broker has the change (well
within a second).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, sm, err := mechanismFlag(mechanism)
			if err != nil {
				return err
			}
			req := &keelpb.AlterUserScramCredentialsRequest{Deletions: []*keelpb.ScramCredentialDeletion{{Name: args[0], Mechanism: m}}}
			return alterUser(cmd, a, req, userResult{User: args[0], Mechanism: sm.Name, Action: "removed"})
		},
	}
	a.add(cmd)
	cmd.Flags().StringVar(&mechanism, "mechanism", scram.SHA512.Name, "SCRAM-SHA-512 or SCRAM-SHA-256")
	return cmd
}

// userRow is one credential as `keel user list` prints it.
type userRow struct {
	User       string `json:"user"`
	Mechanism  string `json:"mechanism"`
	Iterations int32  `json:"iterations"`
}

func newUserListCmd() *cobra.Command {
	a := &adminFlags{}
	r := &readFlags{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the SCRAM users: mechanisms and iterations, never a key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return readCall(cmd, a, r, func(ctx context.Context, c *rpc.Client, opts []rpc.ReadOption) ([]userRow, *keelpb.ReadSource, error) {
				resp, err := c.DescribeUserScramCredentials(ctx, opts...)
				if err != nil {
					return nil, nil, err
				}
				rows := []userRow{}
				for _, cr := range resp.GetCredentials() {
					rows = append(rows, userRow{User: cr.GetUser(), Mechanism: fsm.ScramMechanismName(cr.GetMechanism()), Iterations: cr.GetIterations()})
				}
				return rows, resp.GetSource(), nil
			}, func(w io.Writer, rows []userRow) error {
				if len(rows) == 0 {
					_, err := fmt.Fprintln(w, "no SCRAM users")
					return err
				}
				table := [][]string{{"USER", "MECHANISM", "ITERATIONS"}}
				for _, r := range rows {
					table = append(table, []string{r.User, r.Mechanism, strconv.Itoa(int(r.Iterations))})
				}
				return printTable(w, table)
			})
		},
	}
	a.add(cmd)
	r.add(cmd)
	return cmd
}
