// Package rpc holds Keel's gRPC servers and clients: request validation, the
// one mapping from controller errors to gRPC status codes (with the leader's
// address in the details), and a client that finds the active controller by
// following those hints.
package rpc
