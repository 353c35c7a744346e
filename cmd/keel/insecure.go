package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/keel-dev/keel/internal/hostport"
)

// flagInsecure is --insecure on the commands that run a controller or a
// broker: run plaintext on addresses other than loopback. Admin commands are
// clients and have none: they speak plaintext to a plaintext cluster.
const flagInsecure = "insecure"

// addInsecureFlag gives a command that runs a process --insecure.
func addInsecureFlag(cmd *cobra.Command, insecure *bool) {
	cmd.Flags().BoolVar(insecure, flagInsecure, false,
		"run without TLS off loopback: then anyone who can reach the ports can forge metadata")
}

// flagAddr is an address a process listens on, advertises or dials, with
// the flag that gave it and, in an id@host:port list, the entry's id.
type flagAddr struct {
	flag string
	id   int32 // 0: the flag's value is a plain address
	addr string
}

// String names the address as the flag gives it: "--listen 10.0.0.1:9091",
// "--voters 2@10.0.0.2:9091".
func (a flagAddr) String() string {
	if a.id != 0 {
		return fmt.Sprintf("%s %d@%s", a.flag, a.id, a.addr)
	}
	return a.flag + " " + a.addr
}

// errInsecureWithTLS: --insecure asks for plaintext, the --tls-* flags for TLS.
var errInsecureWithTLS = errors.New("--insecure and --tls-cert, --tls-key, --tls-ca contradict each other: --insecure runs plaintext; drop it to run with TLS, or drop the --tls-* flags")

// checkPlaintext decides whether a controller or broker may start with the
// TLS it was given (tlsGiven: any --tls-* flag) and --insecure, listening
// on, advertising and dialing addrs. With TLS, always (unless --insecure
// contradicts it). Without TLS, only if every address is loopback
// (hostport.IsLoopback) or --insecure says plaintext is a choice: then it
// returns the first address that is not loopback, for the warning. The
// refusal is one line naming that address and the two ways out.
func checkPlaintext(tlsGiven, insecure bool, addrs []flagAddr) (exposed *flagAddr, err error) {
	if tlsGiven {
		if insecure {
			return nil, errInsecureWithTLS
		}
		return nil, nil
	}
	for _, a := range addrs {
		if a.addr != "" && !hostport.IsLoopback(a.addr) {
			exposed = &a
			break
		}
	}
	if exposed != nil && !insecure {
		return nil, fmt.Errorf("%s is not a loopback address and TLS is off: give --tls-cert, --tls-key and --tls-ca (keel cert makes them), or --insecure to run plaintext anyway, where anyone who can reach the port can forge metadata", exposed)
	}
	return exposed, nil
}

// tlsGiven reports whether any --tls-* flag has a value.
func tlsGiven(cmd *cobra.Command) bool {
	cert, key, ca := tlsFlagValues(cmd)
	return cert != "" || key != "" || ca != ""
}

// logPlaintext says at start how a process without TLS runs: a warning when
// --insecure let it run on a non-loopback address, a note otherwise.
func logPlaintext(log *slog.Logger, insecure bool, exposed *flagAddr) {
	switch {
	case exposed != nil:
		log.Warn("running without TLS (--insecure) on an address that is not loopback: nothing is authenticated, and anyone who can reach the ports, or the network between them, can forge metadata; give --tls-cert, --tls-key and --tls-ca to turn TLS on",
			"address", exposed.String())
	case insecure:
		log.Warn("running without TLS (--insecure): nothing is authenticated, and anyone who can reach the ports can forge metadata; every address is loopback, so that is this machine's users")
	default:
		log.Info("running without TLS: every address is loopback, so only this machine can reach the ports")
	}
}
