package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestTLSFlags_ErrorsNameTheSource: a TLS file that does not load is named
// with where its path came from (a variable, a --config file), so that a
// value the user never typed is found; the command line's stays the flag.
func TestTLSFlags_ErrorsNameTheSource(t *testing.T) {
	_, files := testCerts(t, "admin", "broker-1", "controller-1")
	admin, brk, ctrl := files["admin"], files["broker-1"], files["controller-1"]
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	addr := freeAddr(t)
	controller := func() []string {
		return []string{"controller", "--node-id", "1", "--data-dir", t.TempDir(), "--voters", "1@" + addr}
	}
	brokerCfg := writeFile(t, filepath.Join(dir, "broker.yaml"), "tls-ca: "+missing+"\n")
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{
			name: "a key from the controller's variable that does not match",
			env:  map[string]string{"KEEL_CONTROLLER_TLS_CERT": ctrl.Cert, "KEEL_CONTROLLER_TLS_KEY": admin.Key},
			args: append(controller(), "--tls-ca", ctrl.CA),
			want: "--tls-cert " + ctrl.Cert + " (from env KEEL_CONTROLLER_TLS_CERT), --tls-key " + admin.Key +
				" (from env KEEL_CONTROLLER_TLS_KEY): tls: private key does not match public key",
		},
		{
			name: "another's certificate from the controller's variables",
			env:  map[string]string{"KEEL_CONTROLLER_TLS_CERT": brk.Cert, "KEEL_CONTROLLER_TLS_KEY": brk.Key, "KEEL_CONTROLLER_TLS_CA": brk.CA},
			args: controller(),
			want: "--tls-cert " + brk.Cert + " (from env KEEL_CONTROLLER_TLS_CERT) is for broker-1, not controller-1 (this node's --node-id)",
		},
		{
			name: "an unreadable CA from the broker's --config file",
			args: []string{"broker", "--config", brokerCfg, "--broker-id", "1", "--listen", addr, "--data-dir", t.TempDir(), "--tls-cert", brk.Cert, "--tls-key", brk.Key},
			want: "--tls-ca " + missing + " (from --config " + brokerCfg + "): no such file or directory",
		},
		{
			name: "the CLI's variables, one missing",
			env:  map[string]string{"KEEL_TLS_CERT": admin.Cert, "KEEL_TLS_KEY": admin.Key},
			args: []string{"topic", "list"},
			want: "--tls-cert, --tls-key and --tls-ca go together: --tls-ca is missing (--tls-cert from env KEEL_TLS_CERT, --tls-key from env KEEL_TLS_KEY)",
		},
		{
			name: "a CA from KEEL_CERTS_DIR that is not there",
			env:  map[string]string{"KEEL_CERTS_DIR": dir},
			args: []string{"cert", "create", "admin"},
			want: "CA certificate " + filepath.Join(dir, "ca.pem") + ": no such file or directory (--certs-dir from env KEEL_CERTS_DIR)",
		},
		{
			name: "a flag over a variable: the flag is named alone",
			env:  map[string]string{"KEEL_TLS_KEY": admin.Key},
			args: []string{"topic", "list", "--tls-cert", admin.Cert, "--tls-key", missing, "--tls-ca", admin.CA},
			want: "--tls-key " + missing + ": no such file or directory",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := runKeel(t, tt.args...)
			if err == nil || !strings.Contains(errorLine(err), tt.want) || strings.Contains(errorLine(err), "\n") {
				t.Fatalf("keel %s: %v, want one line containing %q", strings.Join(tt.args, " "), err, tt.want)
			}
		})
	}
}

// TestConfig_ProcessesIgnoreTheCLIsVariables: the admin certificate
// exported for keel's admin commands (KEEL_TLS_*) is not read by a
// controller, a broker or keel dev started from the same shell; the admin
// commands still read it.
func TestConfig_ProcessesIgnoreTheCLIsVariables(t *testing.T) {
	_, files := testCerts(t, "admin")
	admin := files["admin"]
	t.Setenv("KEEL_TLS_CERT", admin.Cert)
	t.Setenv("KEEL_TLS_KEY", admin.Key)
	t.Setenv("KEEL_TLS_CA", admin.CA)
	for _, args := range [][]string{{"controller"}, {"broker"}, {"dev"}} {
		out, _, err := runBench(t, t.Context(), append(args, "--print-config")...)
		if err != nil {
			t.Fatalf("keel %s --print-config: %v", args[0], err)
		}
		values, from := printedSettings(t, out)
		for _, flag := range []string{"tls-cert", "tls-key", "tls-ca"} {
			if values[flag] != "" || from[flag] != "default" {
				t.Errorf("keel %s: %s = %v (%s), want the default", args[0], flag, values[flag], from[flag])
			}
		}
		if want := "# Ignored KEEL_TLS_CERT, the CLI's: this command reads KEEL_" + strings.ToUpper(args[0]) + "_TLS_CERT."; !strings.Contains(out, want) {
			t.Errorf("keel %s --print-config does not say %q:\n%s", args[0], want, out)
		}
	}
	// A controller refused before its logger says which variables it
	// ignored says so in its error line.
	_, err := runKeel(t, "controller", "--node-id", "1", "--data-dir", t.TempDir(), "--voters", "bad")
	if want := "(ignored the CLI's KEEL_TLS_CA, KEEL_TLS_CERT, KEEL_TLS_KEY: keel controller reads KEEL_CONTROLLER_TLS_CA, KEEL_CONTROLLER_TLS_CERT, KEEL_CONTROLLER_TLS_KEY)"; err == nil || !strings.HasSuffix(errorLine(err), want) {
		t.Errorf("controller with bad --voters: %v, want it to end %q", err, want)
	}
	// An admin command still reads them: a partial set is refused, naming
	// them.
	t.Setenv("KEEL_TLS_CA", "")
	if _, err = runKeel(t, "topic", "list"); err == nil || !strings.Contains(err.Error(), "--tls-cert from env KEEL_TLS_CERT") {
		t.Errorf("topic list with KEEL_TLS_CERT and KEEL_TLS_KEY: %v", err)
	}
}
