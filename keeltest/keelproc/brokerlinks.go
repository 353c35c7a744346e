package keelproc

import (
	"fmt"
	"strings"

	"github.com/keel-dev/keel/internal/faultproxy"
)

// Broker links (Config.ProxyBrokers): each broker dials each controller
// through a faultproxy.Proxy of its own, named broker-B-to-controller-C and
// in front of the controller's voter address (its fault net proxy, if
// any). The broker is told with keel broker's --test-dial-via, which also
// routes the leader hints it follows, since those name voter addresses.
// Cutting them cuts that broker off from the quorum, in the direction it
// dials, while its process, its own port and the other brokers' links stay
// up. A broker keeps its links across restarts, and they close with the
// Cluster.

// linkBroker makes broker id's links, once, and returns the flags that
// route its dials through them.
func (c *Cluster) linkBroker(id int32) ([]string, error) {
	if !c.cfg.ProxyBrokers {
		return nil, nil
	}
	voters := c.VoterAddrs()
	c.mu.Lock()
	defer c.mu.Unlock()
	links := c.brokerLinks[id]
	if links == nil {
		links = make(map[int32]*faultproxy.Proxy, len(voters))
		for i, addr := range voters {
			ctrl := int32(i + 1)
			p, err := faultproxy.New(fmt.Sprintf("broker-%d-to-controller-%d", id, ctrl), addr)
			if err != nil {
				for _, p := range links {
					p.Close()
				}
				return nil, err
			}
			links[ctrl] = p
		}
		if c.brokerLinks == nil {
			c.brokerLinks = make(map[int32]map[int32]*faultproxy.Proxy)
		}
		c.brokerLinks[id] = links
	}
	via := make([]string, 0, len(links))
	for ctrl := int32(1); int(ctrl) <= len(links); ctrl++ {
		p := links[ctrl]
		via = append(via, p.Target()+"="+p.Addr())
	}
	return []string{"--test-dial-via", strings.Join(via, ",")}, nil
}

// BrokerLink is the proxy broker dials controller through
// (Config.ProxyBrokers), or nil if there is none.
func (c *Cluster) BrokerLink(broker, controller int32) *faultproxy.Proxy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.brokerLinks[broker][controller]
}

// SetBrokerLinks sets every link of broker to the controllers to m
// (faultproxy.Drop cuts them and refuses new connections, Up restores
// them). It fails for a broker without links.
func (c *Cluster) SetBrokerLinks(broker int32, m faultproxy.Mode) error {
	c.mu.Lock()
	links := c.brokerLinks[broker]
	c.mu.Unlock()
	if len(links) == 0 {
		return fmt.Errorf("keelproc: broker %d has no links to the controllers (Config.ProxyBrokers)", broker)
	}
	for _, p := range links {
		p.Set(m)
	}
	return nil
}

// closeBrokerLinks closes every broker link, with the connections they
// carry.
func (c *Cluster) closeBrokerLinks() {
	c.mu.Lock()
	all := c.brokerLinks
	c.brokerLinks = nil
	c.mu.Unlock()
	for _, links := range all {
		for _, p := range links {
			p.Close()
		}
	}
}
