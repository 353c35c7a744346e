package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// A controller whose image is not the quorum's stops acting on it.
//
// The FSM records why (fsm.Divergence): it refused a committed entry, which
// the leader's FSM accepted (a leader never proposes a batch its FSM
// refuses), or the active controller found its image digest different from
// the one a majority of the voters hold at the same index. From then on the
// node is not ready (server's readiness), answers no stale read, and never
// becomes the active controller: raft may still elect it, since its log is
// as good as any, but it does not take over, and hands raft leadership to
// a voter that is ready. Its log stays useful: it goes on storing and
// acknowledging entries, so the quorum keeps its margin.
//
// The active controller compares the voters' digests every
// ImageCheckInterval (etcd's corruption check, on Keel's rolling digest of
// the applied entries: fsm/digest.go): its own latest digest, and each
// voter's at the same index (CompareImage). A voter whose digest differs from
// the one held by a majority of the voters is told so, and stops; if this
// node is the one that differs, it stops itself. Digests that differ with
// no majority among them stop nobody: they are reported (the metric, the
// status, an error in the log) for an operator to judge.

// DefaultImageCheckInterval is how often the active controller compares
// the voters' image digests.
const DefaultImageCheckInterval = 10 * time.Second

// imageCheckTimeout bounds one voter's answer, waiting for it to apply the
// index included.
const imageCheckTimeout = 2 * time.Second

// divergedHint is what an operator does about a node that stopped acting
// on its image.
func divergedHint(id int32) string {
	return fmt.Sprintf("if its binary is older than the cluster's metadata.version, install the right one and restart it; "+
		"otherwise rebuild it from the quorum: keel quorum remove-voter %d, move its data dir aside, start it on an empty data dir with --join, then keel quorum add-voter %d with its address", id, id)
}

// Diverged returns why this node does not act on its image, or nil.
func (c *Controller) Diverged() *fsm.Divergence { return c.fsm.Diverged() }

// watchDivergence logs, once, that this node stopped acting on its image.
func (c *Controller) watchDivergence(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-c.fsm.DivergedCh():
	}
	d := c.fsm.Diverged()
	c.log.Error("this controller's metadata image is not the quorum's: it stops acting on it (not ready, never the active controller) until it is fixed",
		"index", d.Index, "reason", d.Reason, "what_to_do", divergedHint(c.cfg.NodeID))
}

// handAway hands leadership to a voter fit to lead (ready, caught up),
// as the takeover does when it cannot establish, until this node no longer
// leads or the leadership ends: a node whose image diverged must not be the
// active controller, and a quorum whose leader never takes over has none.
// When no voter is fit it hands leadership to the one whose log is longest,
// unchecked (handOn): any voter whose image is the quorum's does better than
// this node. A follower that only lacks the log's own entries of the terms
// this node led (which no state machine applies, so it is not ready until
// an active controller writes again) is such a voter.
func (l *leadership) handAway(why string) {
	_, longest, _ := l.c.takeoverTiming()
	wait := longest
	for attempt := 1; l.ctx.Err() == nil && l.c.quorum.State() == consensus.Leader; attempt++ {
		l.log.Warn("elected, but this node's image diverged: handing leadership away", "attempt", attempt, "reason", why)
		_, err := l.c.handOn(l.ctx, nil, true)
		if err == nil {
			return
		}
		l.log.Warn("handing leadership away failed; trying again", "err", err, "in", wait)
		select {
		case <-l.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// imageAnswer is one voter's digest at the index compared: sum nil when it
// had none (why says why).
type imageAnswer struct {
	sum []byte
	why string
}

// imageVerdict is what judgeImages makes of the voters' answers.
type imageVerdict struct {
	majority   []byte  // the digest a majority holds; nil when none does
	agree      []int32 // the voters holding it
	differ     []int32 // voters whose digest is another (with or without a majority)
	unknown    []int32 // voters without a digest to compare
	noMajority bool    // the digests differ and no majority holds one
}

// judgeImages compares the digests answers hold (by voter id, this node's
// own among them) among voters, the voters of the configuration. A digest
// held by more than half of voters is the majority's, and every voter that
// answered another differs from it. Without one, digests that are not all
// equal differ from each other: no one can say whose image is the quorum's.
func judgeImages(voters []int32, answers map[int32]imageAnswer) imageVerdict {
	var v imageVerdict
	holders := map[string][]int32{}
	for _, id := range voters {
		a, ok := answers[id]
		if !ok || a.sum == nil {
			v.unknown = append(v.unknown, id)
			continue
		}
		holders[string(a.sum)] = append(holders[string(a.sum)], id)
	}
	for sum, ids := range holders {
		if 2*len(ids) > len(voters) {
			v.majority, v.agree = []byte(sum), slices.Sorted(slices.Values(ids))
		}
	}
	if v.majority == nil {
		if len(holders) > 1 {
			v.noMajority = true
			for _, ids := range holders {
				v.differ = append(v.differ, ids...)
			}
			slices.Sort(v.differ)
		} else {
			for _, ids := range holders {
				v.agree = slices.Sorted(slices.Values(ids))
			}
		}
		return v
	}
	for sum, ids := range holders {
		if sum != string(v.majority) {
			v.differ = append(v.differ, ids...)
		}
	}
	slices.Sort(v.differ)
	return v
}

// imageCheck is the latest comparison, as Describe reports it.
type imageCheck struct {
	at      time.Time
	index   uint64
	verdict imageVerdict
	why     map[int32]string // why each unknown voter had no digest
}

// proto is the check as DescribeQuorum reports it, now.
func (ic *imageCheck) proto(now time.Time) *keelpb.ImageCheck {
	out := &keelpb.ImageCheck{Index: ic.index, AgeMs: now.Sub(ic.at).Milliseconds(), NoMajority: ic.verdict.noMajority}
	add := func(ids []int32, result string) {
		for _, id := range ids {
			out.Voters = append(out.Voters, &keelpb.ImageCheckVoter{Id: id, Result: result, Detail: ic.why[id]})
		}
	}
	add(ic.verdict.agree, "agrees")
	add(ic.verdict.differ, "differs")
	add(ic.verdict.unknown, "unknown")
	sort.Slice(out.Voters, func(i, j int) bool { return out.Voters[i].Id < out.Voters[j].Id })
	return out
}

// ImageCheck returns the active controller's latest comparison of the
// voters' image digests, or nil when this node is not active or has not
// compared yet in its term.
func (c *Controller) ImageCheck() *keelpb.ImageCheck {
	l := c.active.Load()
	if l == nil {
		return nil
	}
	ic := l.imageChecked.Load()
	if ic == nil {
		return nil
	}
	return ic.proto(time.Now())
}

// checkImagesOnce asks every other voter for its digest at the index of
// this node's latest, judges, and acts on the verdict.
func (l *leadership) checkImagesOnce() {
	own, ok := l.c.fsm.LatestDigest()
	if !ok {
		return // none until the next takeover; this one committed an epoch, so rarely
	}
	conf, _, err := l.c.configuration()
	if err != nil {
		return
	}
	var voters []int32
	answers := map[int32]imageAnswer{l.c.cfg.NodeID: {sum: own.Sum[:]}}
	why := map[int32]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range conf.Servers {
		if s.Suffrage != consensus.Voter {
			continue
		}
		id := s.ID
		voters = append(voters, id)
		if id == l.c.cfg.NodeID {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(l.ctx, imageCheckTimeout)
			defer cancel()
			resp, err := l.c.cfg.CompareImage(ctx, id, s.Address, &keelpb.CompareImageRequest{Index: own.Index, FromId: l.c.cfg.NodeID})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				why[id] = fmt.Sprintf("did not answer: %v", err)
			case len(resp.GetDigest()) == 0:
				why[id] = resp.GetNoDigest()
			case resp.GetChainStart() != own.Start:
				why[id] = fmt.Sprintf("its digest chain started at index %d, the active controller's at %d (one of them restored a snapshot that carried none): they do not compare", resp.GetChainStart(), own.Start)
			default:
				answers[id] = imageAnswer{sum: resp.GetDigest()}
			}
		}()
	}
	wg.Wait()
	if l.ctx.Err() != nil {
		return
	}
	v := judgeImages(voters, answers)
	l.imageChecked.Store(&imageCheck{at: time.Now(), index: own.Index, verdict: v, why: why})
	if len(v.differ) == 0 {
		return
	}
	l.c.metrics.imageMismatches.Add(float64(len(v.differ)))
	if v.noMajority {
		l.log.Error("the voters' image digests differ and no majority holds one: no controller is stopped; compare their metadata (keel metadata dump) to find the one that is wrong",
			"index", own.Index, "digests", describeDigests(answers, v.differ))
		return
	}
	majority := fmt.Sprintf("controllers %s of %d hold it", joinIDs(v.agree), len(voters))
	for _, id := range v.differ {
		// Once per voter and term: a voter that stopped differs at every
		// comparison after, which the metric and the status show. This
		// node differing says so itself (watchDivergence).
		if !l.reportedImages[id] && id != l.c.cfg.NodeID {
			l.reportedImages[id] = true
			l.log.Error("a controller's image digest differs from the majority's: it stops acting on its image",
				"controller", id, "index", own.Index, "majority", majority, "what_to_do", divergedHint(id))
		}
		if id == l.c.cfg.NodeID {
			l.c.fsm.MarkDiverged(own.Index, fmt.Sprintf("its image digest at index %d differs from the one a majority of the voters hold (%s)", own.Index, majority))
			continue
		}
		l.tellDiverged(id, conf, own, v.majority, majority)
	}
}

// tellDiverged sends voter id the majority's digest as of own's entry: it
// compares its own and, finding it differs, stops acting on its image.
func (l *leadership) tellDiverged(id int32, conf consensus.Configuration, own fsm.Digest, digest []byte, majority string) {
	for _, s := range conf.Servers {
		if s.ID != id {
			continue
		}
		ctx, cancel := context.WithTimeout(l.ctx, imageCheckTimeout)
		defer cancel()
		_, err := l.c.cfg.CompareImage(ctx, id, s.Address, &keelpb.CompareImageRequest{
			Index: own.Index, ChainStart: own.Start, MajorityDigest: digest, Majority: majority, FromId: l.c.cfg.NodeID})
		if err != nil && l.ctx.Err() == nil {
			l.log.Warn("could not tell a controller its image differs from the majority's", "controller", id, "err", err)
		}
		return
	}
}

// AnswerCompareImage is a voter's answer to the active controller's
// CompareImage: its digest at the index asked about, waiting (within ctx)
// until it has applied it; given the majority's digest, it first judges its
// own (JudgeOwnImage), and says whether it has diverged.
func (c *Controller) AnswerCompareImage(ctx context.Context, req *keelpb.CompareImageRequest) *keelpb.CompareImageResponse {
	resp := &keelpb.CompareImageResponse{NodeId: c.cfg.NodeID, Index: req.GetIndex()}
	d, err := c.DigestAt(ctx, req.GetIndex())
	if err != nil {
		resp.NoDigest = err.Error()
	} else {
		resp.Digest, resp.ChainStart = d.Sum[:], d.Start
	}
	if m := req.GetMajorityDigest(); len(m) == sha256.Size {
		c.JudgeOwnImage(req.GetIndex(), req.GetChainStart(), m, req.GetMajority(), req.GetFromId())
	}
	if dv := c.Diverged(); dv != nil {
		resp.DivergedIndex, resp.DivergedReason = dv.Index, dv.Reason
	}
	return resp
}

// JudgeOwnImage is a voter's side of a verdict (CompareImage with the
// majority's digest, of a chain started at start): when its own digest at
// index, of a chain started there too, is another, this node stops acting
// on its image. It reports whether it did.
func (c *Controller) JudgeOwnImage(index, start uint64, majorityDigest []byte, majority string, from int32) bool {
	own, err := c.fsm.DigestAt(index)
	if err != nil || own.Start != start || bytes.Equal(own.Sum[:], majorityDigest) {
		return false
	}
	return c.fsm.MarkDiverged(index, fmt.Sprintf("its image digest at index %d differs from the one a majority of the voters hold (%s; compared by controller %d)", index, majority, from))
}

func describeDigests(answers map[int32]imageAnswer, ids []int32) string {
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("controller %d: %x", id, answers[id].sum[:6]))
	}
	return strings.Join(parts, ", ")
}

func joinIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

// DigestAt returns this node's digest as of the entry at index, waiting
// until ctx ends for it to be applied: a voter asked by the leader is
// usually a moment behind it.
func (c *Controller) DigestAt(ctx context.Context, index uint64) (fsm.Digest, error) {
	for {
		d, err := c.fsm.DigestAt(index)
		if !errors.Is(err, fsm.ErrDigestNotApplied) {
			return d, err
		}
		select {
		case <-ctx.Done():
			return d, err
		case <-time.After(5 * time.Millisecond):
		}
	}
}
