package broker

import (
	"testing"
	"time"

	"github.com/keel-dev/keel/rpc"
	"github.com/keel-dev/keel/tlsauth"
)

func tlsConfigs(t *testing.T, names ...string) map[string]*tlsauth.Config {
	t.Helper()
	ca, err := tlsauth.NewCA("keel broker test CA")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tlsauth.Config{}
	for _, n := range names {
		if out[n], err = ca.Config(n); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestAgent_TLSCertificateOfAnotherBroker: a broker whose certificate is
// another broker's is refused by the controllers and stops, saying why.
func TestAgent_TLSCertificateOfAnotherBroker(t *testing.T) {
	certs := tlsConfigs(t, "controller-1", "broker-1")
	c := newFakeClusterWith(t, 1, rpc.ServerOptions(rpc.WithTLS(certs["controller-1"]))...)
	a := startAgent(t, c, func(cfg *Config) {
		cfg.BrokerID = 2
		cfg.TLS = certs["broker-1"]
	})
	select {
	case err := <-a.Fatal():
		want := "the controllers refused broker 2's registration: broker_id 2: certificate is for broker 1"
		if err.Error() != want {
			t.Fatalf("fatal error %q, want %q", err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not stop")
	}
	if regs := c.registrationCalls(); len(regs) != 0 {
		t.Fatalf("the controller saw %d registrations, want none", len(regs))
	}
}
