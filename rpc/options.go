package rpc

import (
	"context"
	"net"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/keel-dev/keel/tlsauth"
)

// Option configures a client (NewClient, DialBroker) or a server's options
// (ServerOptions).
type Option func(*options)

type options struct {
	tls      *tlsauth.Config
	failFast bool
	dialer   func(context.Context, string) (net.Conn, error)
	limits   ServerLimits
	acls     ACLDecider
}

// WithForwardedACLs has a TLS server allow a broker's forwarded request for
// a principal that is no admin's when acls allow what it does (Kafka's
// controller authorizing a forwarded principal by its ACLs).
func WithForwardedACLs(acls ACLDecider) Option {
	return func(o *options) { o.acls = acls }
}

// ServerLimits bound the calls a server's clients may hold in flight
// (calllimit.go). A zero field takes its default.
type ServerLimits struct {
	// StreamsPerConn is the calls in flight on one connection
	// (grpc.MaxConcurrentStreams); default DefaultControllerStreams.
	StreamsPerConn int
	// CallsPerIdentity is the calls in flight of one certificate identity,
	// with TLS (without, every client is trusted); default
	// DefaultCallsPerIdentity; negative: no bound.
	CallsPerIdentity int
	// MaxRequestBytes is the largest request message of any method the
	// server serves (grpc.MaxRecvMsgSize), read whole before any check;
	// default maxRecvMsgBytes, what the controllers' largest requests need.
	MaxRequestBytes int
}

// BrokerServerLimits are a broker's gRPC server's: its requests (a
// replica fetch, an inspect) are small, and a follower holds one call per
// partition it follows from a leader.
var BrokerServerLimits = ServerLimits{StreamsPerConn: DefaultBrokerStreams, CallsPerIdentity: -1, MaxRequestBytes: smallRequestBytes}

// WithServerLimits sets a server's bounds on calls in flight (for
// ServerOptions).
func WithServerLimits(l ServerLimits) Option {
	return func(o *options) { o.limits = l }
}

// withDefaults is l with its zero fields defaulted.
func (l ServerLimits) withDefaults() ServerLimits {
	if l.StreamsPerConn <= 0 {
		l.StreamsPerConn = DefaultControllerStreams
	}
	if l.CallsPerIdentity == 0 {
		l.CallsPerIdentity = DefaultCallsPerIdentity
	}
	if l.MaxRequestBytes <= 0 {
		l.MaxRequestBytes = maxRecvMsgBytes
	}
	return l
}

// WithTLS turns on mutual TLS with cfg; nil keeps plaintext. A client
// presents cfg's certificate and requires the server's to be a controller's
// (NewClient) or a broker's (DialBroker), valid for the host it dials. A
// server requires a client certificate from cfg's CA and authorizes every
// call by it (see methodRules).
func WithTLS(cfg *tlsauth.Config) Option {
	return func(o *options) { o.tls = cfg }
}

// FailFast makes a client's writes give up at once, as its reads do, when no
// controller it was given is listening (every address refuses the
// connection or does not resolve), instead of retrying until the deadline.
// It is for tools, where a typo in --controllers should cost milliseconds; a
// broker keeps trying, since its controllers may be restarting.
func FailFast() Option {
	return func(o *options) { o.failFast = true }
}

// WithDialer makes the client open its connections with dial instead of
// a plain TCP dial; nil keeps the default. Tests use it to route a broker's
// dials through fault proxies (keel broker's hidden --test-dial-via).
func WithDialer(dial func(ctx context.Context, addr string) (net.Conn, error)) Option {
	return func(o *options) { o.dialer = dial }
}

func buildOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// clientDialOptions are dialOptions with the transport credentials o asks
// for, toward a server that must hold role.
func clientDialOptions(o options, role tlsauth.Role) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls.Client(role))
	}
	opts := append(slices.Clone(dialOptions), grpc.WithTransportCredentials(creds))
	opts = append(opts, PooledDialOptions()...)
	if o.dialer != nil {
		opts = append(opts, grpc.WithContextDialer(o.dialer))
	}
	return opts
}

// serverCallOptions are the codec, credentials and interceptors a server
// needs for o: every request is bounded before it is decoded (serverCodec)
// and checked by Validate once it is; with TLS, each call is first
// authorized by the caller's certificate, by its method before the request
// is read (authorizeTap) and, for what depends on the request, once it is
// decoded (authUnary, authStream). The codec's refusals come first in the
// chains: they stand in for a decoding error.
func serverCallOptions(o options) []grpc.ServerOption {
	codec := &serverCodec{}
	opts := []grpc.ServerOption{grpc.ForceServerCodecV2(codec)}
	if o.tls == nil {
		return append(opts,
			grpc.Creds(serverCreds(o)),
			grpc.ChainUnaryInterceptor(codec.refusedUnary, validateUnary),
			grpc.ChainStreamInterceptor(codec.refusedStream, validateStream),
		)
	}
	tapHandle, streams := authorizeTap, []grpc.StreamServerInterceptor{codec.refusedStream, authStream, validateStream}
	if lim := newCallLimiter(o.limits.withDefaults().CallsPerIdentity); lim != nil {
		tapHandle = lim.tap(authorizeTap)
		streams = append(streams, releaseFirstMessage)
	}
	return append(opts,
		grpc.Creds(serverCreds(o)),
		grpc.InTapHandle(tapHandle),
		grpc.ChainUnaryInterceptor(codec.refusedUnary, authUnary(o.acls), validateUnary),
		grpc.ChainStreamInterceptor(streams...),
	)
}
