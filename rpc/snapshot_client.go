package rpc

import (
	"context"
	"errors"
	"io"
	"os"
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

// restoreChunkBytes is the size of one chunk of a restore upload.
const restoreChunkBytes = 1 << 20

// RestoreSnapshot uploads the snapshot file at path to the active
// controller, which restores the cluster's metadata from it. Each attempt
// reads the file from the start. force restores another cluster's snapshot
// under this cluster's id.
func (c *Client) RestoreSnapshot(ctx context.Context, path string, force bool) (*keelpb.RestoreSnapshotResponse, error) {
	var resp *keelpb.RestoreSnapshotResponse
	err := c.WriteWithin(ctx, snapshotAttemptTimeout, func(ctx context.Context, cl keelpb.ControllerServiceClient) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		stream, err := cl.RestoreSnapshot(ctx)
		if err != nil {
			return err
		}
		buf := make([]byte, restoreChunkBytes)
		first := true
		for {
			n, rerr := io.ReadFull(f, buf)
			last := rerr == io.EOF || rerr == io.ErrUnexpectedEOF
			if rerr != nil && !last {
				return rerr
			}
			req := &keelpb.RestoreSnapshotRequest{Data: buf[:n], Last: last}
			if first {
				req.ForceClusterId, first = force, false
			}
			if err := stream.Send(req); err != nil {
				if errors.Is(err, io.EOF) {
					break // the server answered early: CloseAndRecv has why
				}
				return err
			}
			if last {
				break
			}
		}
		resp, err = stream.CloseAndRecv()
		return err
	})
	return resp, err
}
