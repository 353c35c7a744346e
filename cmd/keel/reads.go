package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// readFlags are the flags of a command that reads the metadata: by default
// the active controller answers; --linearizable has it confirm its
// leadership first, --stale lets any controller answer from its own image.
type readFlags struct {
	linearizable bool
	stale        bool
}

func (r *readFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&r.linearizable, "linearizable", false,
		"have the active controller confirm it still leads before it answers (every acknowledged write)")
	f.BoolVar(&r.stale, "stale", false,
		"let any controller answer from its own image, maybe behind (it says how far); works without a quorum")
	cmd.MarkFlagsMutuallyExclusive("linearizable", "stale")
}

// options are the rpc read options the flags ask for.
func (r *readFlags) options() []rpc.ReadOption {
	switch {
	case r.linearizable:
		return []rpc.ReadOption{rpc.Linearizable()}
	case r.stale:
		return []rpc.ReadOption{rpc.Stale()}
	}
	return nil
}

// answered is what a read command does with its answer's source and error:
// with --stale it tells stderr how fresh the answer is; an Unavailable
// error without --stale gets the hint that --stale would answer.
func (r *readFlags) answered(cmd *cobra.Command, src *keelpb.ReadSource, err error) error {
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable && !r.stale {
			return status.Error(codes.Unavailable, st.Message()+
				" (--stale reads one controller's own image instead, which may be behind)")
		}
		return err
	}
	if r.stale {
		if src == nil {
			return errors.New("the controller answered without saying where from (a controller older than this keel?)")
		}
		fmt.Fprintln(cmd.ErrOrStderr(), staleNote(src))
	}
	return nil
}

// staleNote says which controller answered a stale read and how far behind
// the active controller its image may be.
func staleNote(s *keelpb.ReadSource) string {
	if s.GetActive() {
		return fmt.Sprintf("stale read: answered by the active controller %d, at applied index %d", s.GetNodeId(), s.GetAppliedIndex())
	}
	note := fmt.Sprintf("stale read: answered by controller %d from its own image, at applied index %d; ", s.GetNodeId(), s.GetAppliedIndex())
	switch ms := s.GetLastContactMs(); {
	case ms < 0:
		note += "it has not heard from a leader since it started"
	default:
		note += fmt.Sprintf("it last heard from the leader %s ago", msAgo(ms))
	}
	if s.GetBehindIndex() > 0 {
		note += fmt.Sprintf(", and has yet to apply index %d, committed %s ago", s.GetBehindIndex(), msAgo(s.GetBehindMs()))
	}
	if s.GetLeaderId() < 0 {
		note += "; it knows no leader now, so writes since may be missing"
	}
	return note
}

func msAgo(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}

// readCall is adminCall for a read command: ask gets the read options and
// returns its answer's source with the answer.
func readCall[V any](cmd *cobra.Command, a *adminFlags, r *readFlags,
	ask func(ctx context.Context, c *rpc.Client, opts []rpc.ReadOption) (V, *keelpb.ReadSource, error),
	table func(w io.Writer, v V) error,
) error {
	return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (V, error) {
		v, src, err := ask(ctx, c, r.options())
		return v, r.answered(cmd, src, err)
	}, table)
}
