// Package rpc is the client side of Keel's wire and the contract both sides
// share: a client that finds the active controller by following leader
// hints (Write, Read, and the typed calls on Client), the reason codes and
// details servers put in their errors (ReasonOf, LeaderHintOf, BadFieldOf,
// ...: code acts on those, never on a message's text), the
// checks every request must pass (Validate, run by every Keel server through
// ServerOptions), the authorization table for mutual TLS, and grpc health.
//
// The controller's gRPC services live beside the controller process
// (package server). This package must never import the controller, raft or
// its stores: the broker library, which teams embed, depends on it.
package rpc
