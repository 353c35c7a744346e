// Package hostport holds the rules for addresses: the one for an address
// another process dials (a controller in --voters, a broker's advertised
// address, a voter being added): host:port with a host and a port in
// 1..65535, which the controller's process, its gRPC services and the client
// library all check, so a value one accepts the others accept too; and the
// one that says whether an address stays on this machine (IsLoopback), which
// decides whether a process may run without TLS.
package hostport

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Check accepts only addresses a peer can dial: an empty host would mean
// "every interface" when listening but is no use as an advertised address.
// Its error names the address.
func Check(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("bad address %q: %v", addr, unwrapAddrErr(err))
	}
	if host == "" {
		return fmt.Errorf("bad address %q: missing host", addr)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("bad address %q: port %q is not in 1..65535", addr, port)
	}
	return nil
}

// unwrapAddrErr drops the address that net.AddrError repeats, since the
// caller has already named it.
func unwrapAddrErr(err error) error {
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return errors.New(ae.Err)
	}
	return err
}

// IsLoopback reports whether addr (host:port) names this machine only: a
// host of 127.0.0.0/8, ::1 or "localhost". Anything else is not: another
// host name (it may resolve anywhere), an empty host (":9091", every
// interface when listening), 0.0.0.0 or ::, and an address that does not
// parse. A process without TLS may run on loopback addresses only, unless
// told --insecure.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
