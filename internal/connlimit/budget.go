package connlimit

import (
	"fmt"
	"strings"
)

// Budget derivation. Every connection a listener holds is a file
// descriptor, and so is every segment and index a log keeps open, raft's
// and bolt's files, and the connections the process dials. A log that
// cannot open its next segment stops taking writes, so the listeners'
// bounds together must leave the logs a reserve: by default half the
// open-files limit (at least minReserve), which an operator with many
// partitions, or many clients, moves with a flag.
const (
	// minReserve is the smallest reserve derived.
	minReserve = 256
	// maxUnauthenticated is the most unauthenticated connections a
	// derived bound allows a listener, whatever its size: what the gRPC
	// ports always held.
	maxUnauthenticated = 1024
)

// Share is one listener's claim on the descriptors: a weight, for the
// bounds not given, and the bounds given (0: derive).
type Share struct {
	// Flag names the listener's bound in errors ("--kafka-max-connections").
	Flag string
	// Weight is the listener's part of what the reserve leaves, beside
	// the other derived shares'.
	Weight int
	// MaxConns and MaxPerSource, when not 0, are the operator's.
	MaxConns, MaxPerSource int
}

// Plan derives each share's Limits from files, the process's open-files
// limit, and reserved, the descriptors kept for everything but accepted
// connections (0: derived, half of files and at least minReserve). A
// share's MaxConns not given is its weight's part of what is left once
// the reserve and the bounds given are taken; MaxPerSource not given is a
// quarter of MaxConns; MaxUnauthenticated is a quarter of MaxConns, at
// most maxUnauthenticated. It fails, in one line naming the flags, if the
// bounds cannot fit in files beside the reserve.
func Plan(files, reserved int, shares []Share) ([]Limits, error) {
	if reserved < 0 {
		return nil, fmt.Errorf("%d descriptors reserved: want 0 (derived) or more", reserved)
	}
	if reserved == 0 {
		reserved = max(files/2, minReserve)
	}
	left := files - reserved
	weights := 0
	var given []string
	for _, s := range shares {
		switch {
		case s.MaxConns < 0 || s.MaxPerSource < 0:
			return nil, fmt.Errorf("%s: a negative bound", s.Flag)
		case s.MaxConns > 0:
			left -= s.MaxConns
			given = append(given, fmt.Sprintf("%s %d", s.Flag, s.MaxConns))
		default:
			weights += s.Weight
		}
	}
	// Each derived share needs a connection at least.
	derived := len(shares) - len(given)
	if left < derived {
		need := "the listeners"
		if len(given) > 0 {
			need = strings.Join(given, " and ")
		}
		return nil, fmt.Errorf("the open-files limit (RLIMIT_NOFILE) is %d: with %d kept for the logs (--reserved-files), %s leave no room for every listener's connections; raise the limit (ulimit -n) or lower them",
			files, reserved, need)
	}
	out := make([]Limits, len(shares))
	for i, s := range shares {
		n := s.MaxConns
		if n == 0 {
			n = max(left*s.Weight/max(weights, 1), 1)
		}
		per := s.MaxPerSource
		if per == 0 {
			per = max(n/4, 1)
		}
		out[i] = Limits{MaxConns: n, MaxPerSource: per, MaxUnauthenticated: min(max(n/4, 1), maxUnauthenticated)}
	}
	return out, nil
}
