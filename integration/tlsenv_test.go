package integration

// The CLI's variables in a server's environment: the admin certificate an
// operator exported for keel's admin commands (KEEL_TLS_*) is not a
// controller's or a broker's.

import (
	"os"
	"strings"
	"testing"
	"time"
)

// withEnv adds vars (NAME=value) to every controller's and broker's
// environment.
func withEnv(vars ...string) clusterOption {
	return func(o *clusterOptions) { o.cfg.Env = append(o.cfg.Env, vars...) }
}

// TestTLSEnv_ServersIgnoreTheCLIsVariables starts a plaintext controller and
// broker on loopback from a shell that exported the admin certificate for
// the CLI, as the README shows: both start with their own flags (before,
// the controller took KEEL_TLS_* as its certificate and refused to start:
// "--tls-cert is for admin, not controller-1"), the broker registers, and
// each says once which variables it ignored and which it reads instead.
func TestTLSEnv_ServersIgnoreTheCLIsVariables(t *testing.T) {
	admin := newTestPKI(t).certFiles("admin")
	c := startCluster(t, 1, withEnv("KEEL_TLS_CERT="+admin.Cert, "KEEL_TLS_KEY="+admin.Key, "KEEL_TLS_CA="+admin.CA))
	c.WaitForActive(t, activeTimeout)
	c.appendNoOp(t, 10*time.Second)
	c.StartBroker(1)
	c.WaitForBrokers(t, allActive(1))

	for nd, want := range map[string]string{
		c.node(1).LogPath():   `ignored=KEEL_TLS_CA,KEEL_TLS_CERT,KEEL_TLS_KEY instead=KEEL_CONTROLLER_TLS_CA,KEEL_CONTROLLER_TLS_CERT,KEEL_CONTROLLER_TLS_KEY`,
		c.broker(1).LogPath(): `ignored=KEEL_TLS_CA,KEEL_TLS_CERT,KEEL_TLS_KEY instead=KEEL_BROKER_TLS_CA,KEEL_BROKER_TLS_CERT,KEEL_BROKER_TLS_KEY`,
	} {
		b, err := os.ReadFile(nd)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, "ignoring the CLI's variables") {
				lines = append(lines, line)
			}
		}
		if len(lines) != 1 || !strings.Contains(lines[0], "level=INFO") || !strings.Contains(lines[0], want) {
			t.Errorf("%s: %d lines about the CLI's variables, want one INFO holding %q:\n%s", nd, len(lines), want, strings.Join(lines, ""))
		}
	}
}
