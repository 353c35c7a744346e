package rpc

import (
	"context"

	"google.golang.org/grpc/tap"

	"github.com/keel-dev/keel/tlsauth"
)

// authorizeTap refuses, before gRPC reads a byte of the request, every call
// whose method the caller's certificate may never call. It runs as the
// server's tap (grpc.InTapHandle), which gRPC calls on the headers frame,
// before it creates the stream: a refused call is never decoded, and the
// DATA frames the client goes on sending are dropped unbuffered. The
// interceptors (authUnary, authStream) run after decoding; alone, they let
// anyone with a certificate from the CA make the server decode up to
// maxRecvMsgBytes of, say, empty repeated entries, which cost thirty times
// their size in memory before the refusal.
//
// gRPC passes the tap the connection's context, which carries the peer and
// its TLS AuthInfo (grpc-go's serveStreams puts them there before it reads
// any headers), so the certificate is known here. The tap runs on the
// connection's reader goroutine with its lock held: it must not block, and
// it does not (a map lookup and the certificate's common name).
func authorizeTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	id, err := callerIdentity(ctx)
	if err != nil {
		return nil, err
	}
	if err := authorizeMethod(id, info.FullMethodName); err != nil {
		return nil, err
	}
	return ctx, nil
}

// authorizeMethod is authorize without the request: it refuses id unless
// its role may call method with some request, with authorize's refusal.
// The decisions it leaves to authorize after decoding are a broker's
// calls that name a broker id or a forwarded principal in the request
// (rule.readsRequest): a broker's requests are bounded like everyone's
// (requestLimit), and a broker is trusted with their cost.
func authorizeMethod(id tlsauth.Identity, method string) error {
	if r, ok := ruleFor(method); ok && r.readsRequest(id) {
		return nil
	}
	return authorize(id, method, nil)
}
