// Package hostport holds the one rule for an address another process dials
// (a controller in --voters, a broker's advertised address, a voter being
// added): host:port with a host and a port in 1..65535. The controller's
// process, its gRPC services and the client library all check addresses by
// it, so a value one accepts the others accept too.
package hostport

import (
	"errors"
	"fmt"
	"net"
	"strconv"
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
