package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/keel-dev/keel/broker/replication"
	"github.com/keel-dev/keel/internal/hostport"
)

// The test-only produce path: `keel broker --test-produce-listen ADDR`
// (hidden, loopback only) serves POST /produce?topic=T&partition=P&acks=A
// with one v2 record batch as the body, answered by the data plane's
// Produce as JSON. The integration tests write through it until the Kafka
// listener does; it is no interface for anything else.

// testProduceAnswer is the JSON of one answer.
type testProduceAnswer struct {
	BaseOffset int64  `json:"base_offset"`
	Error      string `json:"error,omitempty"` // the Kafka error name, e.g. NOT_ENOUGH_REPLICAS
	Message    string `json:"message,omitempty"`
}

// serveTestProduce serves the test-only produce path on addr until the
// returned stop is called.
func serveTestProduce(addr string, m *replication.Manager, log *slog.Logger) (stop func(), err error) {
	if !hostport.IsLoopback(addr) {
		return nil, fmt.Errorf("--test-produce-listen %s: only a loopback address is allowed", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--test-produce-listen: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /produce", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		partition, err1 := strconv.ParseInt(q.Get("partition"), 10, 32)
		acks, err2 := strconv.ParseInt(q.Get("acks"), 10, 16)
		batch, err3 := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		if err := errors.Join(err1, err2, err3); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		res, err := m.Produce(ctx, q.Get("topic"), int32(partition), batch, int16(acks), 5*time.Second)
		ans := testProduceAnswer{BaseOffset: res.BaseOffset}
		if err != nil {
			var ke *kerr.Error
			if errors.As(err, &ke) {
				ans.Error = ke.Message
			} else {
				ans.Error = "UNKNOWN_SERVER_ERROR"
			}
			ans.Message = err.Error()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ans)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	log.Warn("serving the test-only produce path", "address", lis.Addr().String())
	return func() { _ = srv.Close() }, nil
}
