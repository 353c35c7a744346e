// Command keel is the single Keel binary: controller, broker, dev cluster and
// admin tools. It holds flags and printing only; the work is in the packages.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"google.golang.org/grpc/status"
)

// version is set at build time (make build); otherwise the module version.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "keel:", errorLine(err))
		os.Exit(1)
	}
}

// errorLine renders an error as one line; a gRPC status shows its code. A
// failure that comes from a TLS mismatch gets a hint: gRPC's own words for
// it ("error reading server preface") do not say TLS.
func errorLine(err error) string {
	line := err.Error()
	if st, ok := status.FromError(err); ok {
		line = fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	return line + tlsHint(line)
}

// tlsHints map what Go's TLS stack and gRPC say when the two ends of a
// connection disagree about TLS to what the operator should check.
var tlsHints = []struct{ says, hint string }{
	{"first record does not look like a TLS handshake", "the server does not use TLS: drop --tls-* or turn TLS on for the cluster"},
	{"certificate signed by unknown authority", "the server's certificate is not signed by --tls-ca"},
	{"tls: certificate required", "the server wants a client certificate: give --tls-ca, --tls-cert and --tls-key"},
	{"tls: unknown certificate authority", "the server does not trust this certificate's CA"},
	{"tls: bad certificate", "the server refused this certificate (another CA, or expired?)"},
	{"error reading server preface", "if the cluster uses TLS, give --tls-ca, --tls-cert and --tls-key"},
}

// tlsHint is the hint for a failure that reads like a TLS mismatch, as
// " (hint)", or "".
func tlsHint(line string) string {
	for _, h := range tlsHints {
		if strings.Contains(line, h.says) {
			return " (" + h.hint + ")"
		}
	}
	return ""
}
