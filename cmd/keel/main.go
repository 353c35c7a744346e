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

// version and commit are set at build time (make build: -ldflags -X);
// otherwise they come from the build info Go stamps into the binary.
var (
	version = ""
	commit  = ""
)

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// buildCommit is the commit the binary was built from, "+dirty" when the
// tree had changes, or "unknown" (go run, go test) when Go recorded none.
func buildCommit() string {
	if commit != "" {
		return commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case dirty:
		return rev + "+dirty"
	}
	return rev
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
