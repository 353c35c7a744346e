package rpc

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
)

// snapshotAttemptTimeout bounds one whole snapshot transfer; ctx usually
// ends it sooner.
const snapshotAttemptTimeout = time.Hour

// FetchSnapshot streams a snapshot of the committed image from the active
// controller, following leader hints as Write does. Before every attempt it
// calls start for the writer to fill, so a transfer cut short by a failover
// is started over from an empty writer rather than appended to. It returns
// the number of bytes written by the attempt that succeeded. A stream that
// ends without its last chunk is an error (Unavailable, so it is retried).
func (c *Client) FetchSnapshot(ctx context.Context, start func() (io.Writer, error)) (int64, error) {
	var n int64
	err := c.WriteWithin(ctx, snapshotAttemptTimeout, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		n = 0
		w, err := start()
		if err != nil {
			return err
		}
		stream, err := cl.FetchSnapshot(ctx, &keelpb.FetchSnapshotRequest{})
		if err != nil {
			return err
		}
		for {
			chunk, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return status.Error(codes.Unavailable, "snapshot stream ended before its last chunk")
			}
			if err != nil {
				return err
			}
			k, err := w.Write(chunk.GetData())
			n += int64(k)
			if err != nil {
				return err
			}
			if chunk.GetLast() {
				return nil
			}
		}
	})
	return n, err
}
