package server_test

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestNode_ServeFailureIsFatal: a node whose gRPC server stops serving on
// its own (here: its listener closed under it) says so on Fatal, rather
// than go on as a raft voter that answers no broker or operator.
func TestNode_ServeFailureIsFatal(t *testing.T) {
	_, n := startCluster(t, 1)
	if err := n.CloseGRPCListener(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n.Fatal():
		if !strings.Contains(err.Error(), "gRPC server stopped serving") {
			t.Fatalf("Fatal = %v; want the gRPC server's failure", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the gRPC server stopped serving and Fatal said nothing")
	}
}

// TestNode_SeveralFatalErrorsDoNotHangClose: when two reasons to stop come
// at once (say the node was removed and its gRPC server failed), the first
// is reported and Close still returns: no sender blocks on Fatal.
func TestNode_SeveralFatalErrorsDoNotHangClose(t *testing.T) {
	_, n := startCluster(t, 1)
	first, second := errors.New("first reason"), errors.New("second reason")
	n.Fail(first)
	n.Fail(second)
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return after two fatal errors")
	}
	if err := <-n.Fatal(); err != first {
		t.Fatalf("Fatal = %v; want the first reason", err)
	}
}
