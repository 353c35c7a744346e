// Command keel is the single Keel binary: controller, broker, dev cluster and
// admin tools. It holds flags and printing only; the work is in the packages.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

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

// errorLine renders an error as one line; a gRPC status shows its code.
func errorLine(err error) string {
	if st, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	return err.Error()
}
