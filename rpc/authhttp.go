package rpc

import (
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/tlsauth"
)

// AuthorizeHTTP decides whether the client of r, an HTTP request on a
// node's own listener, may see what method of the admin API answers, by
// the rule table the gRPC servers use (methodRules): the built-in console
// shows what DescribeTopic and the other reads answer, so it asks for
// their rule rather than keeping a copy of who may read. A request without
// TLS (a plaintext listener, which is open as the gRPC one is) is allowed.
// The error is one line naming the caller and what was needed.
//
// Only rules decided by the certificate alone apply: a method whose rule
// reads the request (a broker's call about itself) is refused.
func AuthorizeHTTP(r *http.Request, method string) error {
	if r.TLS == nil {
		return nil
	}
	id, err := tlsauth.PeerIdentity(r.TLS.PeerCertificates)
	if err != nil {
		return fmt.Errorf("%s: %v", shortMethod(method), err)
	}
	if rl, ok := ruleFor(method); ok && rl.readsRequest(id) {
		return fmt.Errorf("%s: its rule reads the request, which an HTTP request has not", shortMethod(method))
	}
	if err := authorize(id, method, nil); err != nil {
		return errors.New(status.Convert(err).Message())
	}
	return nil
}
