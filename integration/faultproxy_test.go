package integration

import (
	"net"
	"strconv"
)

// withFaultNet runs the controllers behind a faultNet (Cluster.net): their
// voter addresses are proxies, and each dials its peers through its own.
func withFaultNet() clusterOption {
	return func(o *clusterOptions) { o.faultNet = true }
}

// listenAddrs names the loopback listen address of each node, by id, for
// ports in id order.
func listenAddrs(ports []int) map[int32]string {
	m := make(map[int32]string, len(ports))
	for i, p := range ports {
		m[int32(i+1)] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return m
}

// voterAddr is node id's address in --voters: its listen address, or its
// public proxy under a faultNet.
func (c *Cluster) voterAddr(id int32, listen string) string {
	if c.net == nil {
		return listen
	}
	return c.net.VoterAddr(id)
}

// VoterAddrs returns every node's address in --voters, in id order: what
// brokers are given, so that under a faultNet they go through the proxies.
func (c *Cluster) VoterAddrs() []string {
	addrs := c.Addrs()
	for i := range addrs {
		addrs[i] = c.voterAddr(int32(i+1), addrs[i])
	}
	return addrs
}
