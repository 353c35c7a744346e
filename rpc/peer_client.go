package rpc

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/tlsauth"
)

// PeerClient is how a controller asks the other controllers of its quorum
// (the peer service), at the addresses it dials them at for raft: their
// voter address, or --raft-dial's. Each question gets its own connection,
// closed once answered: questions are rare (a crash election's look), and a
// connection kept open would go on redialling, in gRPC's background
// reconnects, a voter that is dead or has been removed since
// (TestMembership_RemovedNodeIsNotCalled). With TLS, as raft does, the
// server must hold the certificate of the controller asked, from the CA;
// its host name is not checked, since a peer may be dialled through a
// proxy.
type PeerClient struct {
	dialOpts []grpc.DialOption
	tls      bool
}

// NewPeerClient returns a PeerClient, plaintext unless WithTLS (whose
// certificate must be this node's controller certificate).
func NewPeerClient(opts ...Option) *PeerClient {
	o := buildOptions(opts)
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls.PeerClient(tlsauth.RoleController))
	}
	dial := append(slices.Clone(dialOptions), grpc.WithTransportCredentials(creds))
	dial = append(dial, PooledDialOptions()...)
	if o.dialer != nil {
		dial = append(dial, grpc.WithContextDialer(o.dialer))
	}
	return &PeerClient{dialOpts: dial, tls: o.tls != nil}
}

// LeaderContact asks controller id, at addr, what it knows of leader (the
// peer service's LeaderContact). It fails if the controller that answers
// is not id.
func (c *PeerClient) LeaderContact(ctx context.Context, id int32, addr string, leader int32) (*keelpb.LeaderContactResponse, error) {
	cc, err := grpc.NewClient(addr, c.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("controller address %q: %w", addr, err)
	}
	defer cc.Close()
	var p peer.Peer
	resp, err := keelpb.NewPeerServiceClient(cc).LeaderContact(ctx, &keelpb.LeaderContactRequest{LeaderId: leader}, grpc.Peer(&p))
	if err != nil {
		return nil, err
	}
	if c.tls {
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok {
			return nil, fmt.Errorf("the controller at %s presented no certificate", addr)
		}
		if cert, err := tlsauth.PeerIdentity(info.State.PeerCertificates); err != nil || cert.Role != tlsauth.RoleController || cert.ID != id {
			return nil, fmt.Errorf("the controller at %s is not controller-%d (its certificate: %v, %v)", addr, id, cert, err)
		}
	}
	if resp.GetNodeId() != id {
		return nil, fmt.Errorf("the node at %s is node %d, not %d", addr, resp.GetNodeId(), id)
	}
	return resp, nil
}

// Close releases the client; the caller asks nothing after it. (Each
// question's connection is closed with its answer: nothing is held.)
func (c *PeerClient) Close() {}
