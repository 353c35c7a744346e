package raftlog

import (
	"github.com/keel-dev/keel/internal/hostport"

	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/raft"
)

// Voter is one member of the bootstrap voter list.
type Voter struct {
	ID      int32
	Address string
}

// ParseVoters parses a --voters value such as
// "1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093". Whitespace around
// entries is ignored. It fails, with one line naming the bad entry, on an
// empty list or entry, a missing '@', an id that is not a positive 32-bit
// integer, an address that is not host:port with a port in 1..65535, and on a
// duplicate id or address: raft would reject some of these only at bootstrap,
// and a duplicate address would make two ids dial one node.
func ParseVoters(s string) ([]Voter, error) {
	return parseIDAddrs("--voters", s)
}

// ParseRaftDial parses a --raft-dial value, in the --voters format: the
// addresses at which this node dials some of its peers, when those differ
// from the addresses in the raft configuration (a proxy, NAT, or a private
// network between controllers). An empty value means none.
func ParseRaftDial(s string) (map[int32]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	entries, err := parseIDAddrs("--raft-dial", s)
	if err != nil {
		return nil, err
	}
	m := make(map[int32]string, len(entries))
	for _, e := range entries {
		m[e.ID] = e.Address
	}
	return m, nil
}

// parseIDAddrs parses "ID@HOST:PORT,..." for the flag named flag.
func parseIDAddrs(flag, s string) ([]Voter, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%s is empty (want ID@HOST:PORT,...)", flag)
	}
	parts := strings.Split(s, ",")
	voters := make([]Voter, 0, len(parts))
	ids := make(map[int32]bool, len(parts))
	addrs := make(map[string]bool, len(parts))
	for i, part := range parts {
		entry := strings.TrimSpace(part)
		if entry == "" {
			return nil, fmt.Errorf("%s entry %d is empty (want ID@HOST:PORT)", flag, i+1)
		}
		idStr, addr, ok := strings.Cut(entry, "@")
		if !ok {
			return nil, fmt.Errorf("%s entry %q: missing '@' (want ID@HOST:PORT)", flag, entry)
		}
		id, ok := ParseNodeID(idStr)
		if !ok {
			return nil, fmt.Errorf("%s entry %q: node id %q is not a positive integer", flag, entry, idStr)
		}
		if err := hostport.Check(addr); err != nil {
			return nil, fmt.Errorf("%s entry %q: %v", flag, entry, err)
		}
		if ids[int32(id)] {
			return nil, fmt.Errorf("%s: node id %d appears more than once", flag, id)
		}
		if addrs[addr] {
			return nil, fmt.Errorf("%s: address %s appears more than once", flag, addr)
		}
		ids[int32(id)] = true
		addrs[addr] = true
		voters = append(voters, Voter{ID: int32(id), Address: addr})
	}
	return voters, nil
}

// FindVoter returns the voter with the given id, or an error
// "--voters does not contain node id N".
func FindVoter(voters []Voter, id int32) (Voter, error) {
	for _, v := range voters {
		if v.ID == id {
			return v, nil
		}
	}
	return Voter{}, fmt.Errorf("--voters does not contain node id %d", id)
}

// ServerID is the raft server id of a Keel node id: its decimal form, so that
// raft's own logs and configuration read the same as --node-id.
func ServerID(id int32) raft.ServerID {
	return raft.ServerID(strconv.FormatInt(int64(id), 10))
}

// ParseNodeID parses a node id as every flag and argument gives one: a
// positive decimal integer that fits in 32 bits.
func ParseNodeID(s string) (int32, bool) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n <= 0 {
		return 0, false
	}
	return int32(n), true
}

// ParseServerID is the inverse of ServerID. It fails on anything ServerID
// could not have produced (non-decimal, non-canonical, or not positive), so a
// foreign id in a raft configuration is noticed rather than misread.
func ParseServerID(id raft.ServerID) (int32, error) {
	n, ok := ParseNodeID(string(id))
	if !ok || ServerID(n) != id {
		return 0, fmt.Errorf("raft server id %q is not a Keel node id", string(id))
	}
	return n, nil
}

// dialAddrs is raft's ServerAddressProvider for --raft-dial. A nil map gives
// a nil provider, so raft dials every peer at its configured address.
//
// raft asks the provider for this node's own address too, on every RPC, to
// put in the RPC's header (NetworkTransport.EncodePeer): the provider answers
// advertise, the address the peers know the node by, so that raft neither
// falls back to it with a warning per RPC nor sends a dial address as the
// leader's.
func dialAddrs(m map[int32]string, self int32, advertise string) raft.ServerAddressProvider {
	if len(m) == 0 {
		return nil
	}
	return dialAddrMap{addrs: m, self: self, advertise: raft.ServerAddress(advertise)}
}

type dialAddrMap struct {
	addrs     map[int32]string
	self      int32
	advertise raft.ServerAddress
}

func (m dialAddrMap) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	n, err := ParseServerID(id)
	if err != nil {
		return "", err
	}
	if n == m.self {
		return m.advertise, nil
	}
	addr, ok := m.addrs[n]
	if !ok {
		// raft logs this and falls back to the configured address.
		return "", fmt.Errorf("no --raft-dial address for node %d", n)
	}
	return raft.ServerAddress(addr), nil
}
