package server

// What the external tests (package server_test, which run their quorums on
// keeltest, an importer of this package) check of a node's insides.

// ErrStopping is what Ready says once Close has begun.
var ErrStopping = errStopping

// RecordedClusterID is the cluster id recorded in the node's data dir, ""
// until the log names one.
func (s *Node) RecordedClusterID() string { return s.node.ClusterID() }

// CloseGRPCListener closes the listener the gRPC server accepts on, under
// it, as a failing listener would end.
func (s *Node) CloseGRPCListener() error { return s.mux.GRPC().Close() }

// Fail delivers err on Fatal as the node's own watchers do.
func (s *Node) Fail(err error) { s.fail(err) }
