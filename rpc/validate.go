package rpc

import (
	"net"
	"strconv"

	"github.com/google/uuid"
)

// Field bounds for requests: generous for real use, small enough that a bad
// client cannot make the controller store or log megabytes.
const (
	maxAddressLen   = 255
	maxRackLen      = 255
	maxClusterIDLen = 64
)

func validBrokerID(id int32) error {
	if id < 0 {
		return invalidArgument("broker_id", "%d is negative", id)
	}
	return nil
}

func validBrokerEpoch(epoch int64) error {
	if epoch <= 0 {
		return invalidArgument("broker_epoch", "%d is not a broker epoch (it must be positive)", epoch)
	}
	return nil
}

func validIncarnationID(id string) error {
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return invalidArgument("incarnation_id", "%q is not a UUID", truncate(id))
	}
	return nil
}

func validAddress(field, addr string) error {
	if len(addr) > maxAddressLen {
		return invalidArgument(field, "longer than %d bytes", maxAddressLen)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return invalidArgument(field, "%q is not host:port", truncate(addr))
	}
	if host == "" {
		return invalidArgument(field, "%q has no host", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return invalidArgument(field, "%q: port must be 1..65535", addr)
	}
	return nil
}

func validMaxLen(field, v string, n int) error {
	if len(v) > n {
		return invalidArgument(field, "longer than %d bytes", n)
	}
	return nil
}

func validVersionRange(lo, hi uint32) error {
	if lo == 0 {
		return invalidArgument("min_metadata_version", "must be at least 1")
	}
	if lo > hi {
		return invalidArgument("max_metadata_version", "%d is below min_metadata_version %d", hi, lo)
	}
	return nil
}

// firstError returns the first non-nil error: validations in field order.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
