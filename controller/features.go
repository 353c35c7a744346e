package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/keel-dev/keel/consensus"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// ErrUnsafeDowngrade refuses a metadata.version downgrade that would drop
// what the metadata holds.
var ErrUnsafeDowngrade = errors.New("unsafe metadata.version downgrade")

// How long a voter has to say which levels it supports, and how often the
// active controller asks every voter again to keep the controller
// registrations true (a voter restarted on a new binary reports a new
// range).
const (
	askVoterTimeout           = 2 * time.Second
	controllerRegisterRetry   = 2 * time.Second
	controllerRegisterRefresh = 30 * time.Second
)

// SupportedMetadataVersions is the range of metadata.version levels this
// node reports: the binary's, or below it when Config.MaxMetadataVersion
// pretends an older binary (test wiring).
func (c *Controller) SupportedMetadataVersions() (lo, hi uint32) {
	return fsm.MinMetadataVersion, c.cfg.MaxMetadataVersion
}

// FeatureNode is one node's supported range of metadata.version levels.
type FeatureNode struct {
	Kind     string // "controller" or "broker"
	ID       int32
	Address  string
	Min, Max uint32
	// Err says why a voter's range is unknown (it did not answer).
	Err string
}

// supports reports whether the node is known to support level.
func (n FeatureNode) supports(level uint32) bool {
	return n.Err == "" && n.Min <= level && level <= n.Max
}

func (n FeatureNode) String() string {
	if n.Err != "" {
		return fmt.Sprintf("%s %d did not say which levels it supports: %s", n.Kind, n.ID, n.Err)
	}
	return fmt.Sprintf("%s %d supports %d-%d", n.Kind, n.ID, n.Min, n.Max)
}

// Features is the finalized metadata.version and every node's range.
type Features struct {
	Level uint32
	Nodes []FeatureNode
}

// DescribeFeatures answers the finalized level, each voter's range as the
// voter answers now, and each registered broker's as it registered. Only the
// active controller answers (it is the one that would raise the level).
func (c *Controller) DescribeFeatures(ctx context.Context) (*Features, error) {
	if c.active.Load() == nil {
		return nil, c.notLeader()
	}
	img := c.fsm.Image()
	voters, err := c.voterRanges(ctx)
	if err != nil {
		return nil, err
	}
	return &Features{Level: img.FinalizedMetadataVersion(), Nodes: append(voters, brokerRanges(img)...)}, nil
}

func brokerRanges(img *fsm.Image) []FeatureNode {
	var out []FeatureNode
	for _, b := range img.Brokers() {
		out = append(out, FeatureNode{Kind: "broker", ID: b.ID, Address: b.Address, Min: b.MinMetadataVersion, Max: b.MaxMetadataVersion})
	}
	return out
}

// voterRanges asks every server of the latest raft configuration, in
// parallel, which levels it supports; this node answers for itself. A
// server that does not answer has Err set.
func (c *Controller) voterRanges(ctx context.Context) ([]FeatureNode, error) {
	conf, _, err := c.configuration()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, askVoterTimeout)
	defer cancel()
	out := make([]FeatureNode, len(conf.Servers))
	var wg sync.WaitGroup
	for i, s := range conf.Servers {
		id := s.ID
		out[i] = FeatureNode{Kind: "controller", ID: id, Address: s.Address}
		if s.Suffrage != consensus.Voter {
			out[i].Kind = "controller (nonvoter)"
		}
		if id == c.cfg.NodeID {
			out[i].Min, out[i].Max = c.SupportedMetadataVersions()
			continue
		}
		if c.cfg.AskPeer == nil {
			out[i].Err = "this controller cannot ask its peers"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := c.cfg.AskPeer(ctx, id, string(s.Address))
			switch {
			case err != nil:
				out[i].Err = err.Error()
			case st.MaxMetadataVersion == 0:
				// A binary from before metadata versions were reported
				// reads level 1 only.
				out[i].Min, out[i].Max = fsm.MinMetadataVersion, fsm.BootstrapMetadataVersion
			default:
				out[i].Min, out[i].Max = st.MinMetadataVersion, st.MaxMetadataVersion
			}
		}()
	}
	wg.Wait()
	return out, nil
}

// FeatureUpdate is the outcome of UpdateFeatures.
type FeatureUpdate struct {
	Previous, Level uint32
	Index           uint64 // 0 when the level was already the one asked for
}

// UpdateFeatures moves the finalized metadata.version to level: up, once
// every voter (asked now) and every registered broker supports it; down
// (downgrade), once nothing the metadata holds needs a level above it. The
// FeatureLevel record is decided on the event loop against the image, so a
// broker that registers meanwhile is checked too. It fails with a
// *FieldError for a direction that does not match downgrade,
// ErrUnsupportedMetadataVersion naming the nodes that do not support the
// level (or did not answer), ErrUnsafeDowngrade naming what a downgrade
// would drop, or as a write fails.
func (c *Controller) UpdateFeatures(ctx context.Context, level uint32, downgrade bool) (*FeatureUpdate, error) {
	return c.updateFeatures(ctx, level, downgrade, false)
}

// ValidateFeatures answers as UpdateFeatures would, refusing what it would
// refuse, and writes nothing (Kafka's UpdateFeatures validate_only): the
// change is decided on the confirmed committed image with the voters'
// ranges asked now. Index is 0.
func (c *Controller) ValidateFeatures(ctx context.Context, level uint32, downgrade bool) (*FeatureUpdate, error) {
	return c.updateFeatures(ctx, level, downgrade, true)
}

func (c *Controller) updateFeatures(ctx context.Context, level uint32, downgrade, validateOnly bool) (*FeatureUpdate, error) {
	l := c.active.Load()
	if l == nil {
		return nil, c.notLeader()
	}
	// Confirmed as a linearizable read: "already at that level" is no
	// deposed leader's answer.
	img, err := c.ReadImage(ctx)
	if err != nil {
		return nil, err
	}
	cur := img.FinalizedMetadataVersion()
	if level == cur {
		return &FeatureUpdate{Previous: cur, Level: cur}, nil
	}
	if err := checkDirection(cur, level, downgrade); err != nil {
		return nil, err
	}
	voters, err := c.voterRanges(ctx)
	if err != nil {
		return nil, err
	}
	var unfit []string
	for _, v := range voters {
		if !v.supports(level) {
			unfit = append(unfit, v.String())
		}
	}
	if len(unfit) > 0 {
		return nil, fmt.Errorf("%w: %s cannot become %d: %s", ErrUnsupportedMetadataVersion, fsm.MetadataVersionFeature, level, strings.Join(unfit, "; "))
	}
	if validateOnly {
		if _, err := levelChangeRecords(img, level, downgrade, voters); err != nil {
			return nil, err
		}
		return &FeatureUpdate{Previous: cur, Level: level}, nil
	}
	update := &FeatureUpdate{Level: level}
	index, err := l.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		update.Previous = img.FinalizedMetadataVersion()
		return levelChangeRecords(img, level, downgrade, voters)
	})
	if err != nil {
		return nil, err
	}
	update.Index = index
	if index > 0 {
		c.log.Info("metadata.version changed", "from", update.Previous, "to", level, "index", index)
		l.kickRegistrations()
	}
	return update, nil
}

func checkDirection(cur, level uint32, downgrade bool) error {
	switch {
	case level > cur && downgrade:
		return fieldError("metadata_version", "%d is above the current %d: that is an upgrade, not a downgrade", level, cur)
	case level < cur && !downgrade:
		return fieldError("metadata_version", "%d is below the current %d: lowering the level is a downgrade (keel features downgrade)", level, cur)
	}
	return nil
}

// featureLevelRecords decides the FeatureLevel record that moves img's
// finalized level to level: refused while a registered broker or
// controller does not support it, or (a downgrade) while img holds what
// the lower level cannot express. The state machine checks the same
// (fsm.LevelBlockers); deciding here gives the reason its own error.
func featureLevelRecords(img *fsm.Image, level uint32, downgrade bool) ([]*keelpb.Record, error) {
	cur := img.FinalizedMetadataVersion()
	if level == cur {
		return nil, nil
	}
	if err := checkDirection(cur, level, downgrade); err != nil {
		return nil, err
	}
	if blockers := fsm.LevelBlockers(img, level); len(blockers) > 0 {
		sentinel := ErrUnsupportedMetadataVersion
		if level < cur {
			sentinel = ErrUnsafeDowngrade
		}
		return nil, fmt.Errorf("%w: %s cannot move from %d to %d: %s", sentinel, fsm.MetadataVersionFeature, cur, level, strings.Join(blockers, "; "))
	}
	return []*keelpb.Record{{Record: &keelpb.Record_FeatureLevel{FeatureLevel: &keelpb.FeatureLevelRecord{
		Name: fsm.MetadataVersionFeature, Level: level}}}}, nil
}

// levelChangeRecords decides a change of level with the voters' ranges
// just asked: first the registrations that changed (a controller restarted
// on a newer binary a moment ago, before registerControllers saw it), so
// that the level is checked against the ranges the voters have now, not
// the ones they last registered; then the FeatureLevel record. Nothing
// when the level does not change.
func levelChangeRecords(img *fsm.Image, level uint32, downgrade bool, voters []FeatureNode) ([]*keelpb.Record, error) {
	regs, _ := controllerRegistrationRecords(img, voters)
	next := img
	if len(regs) > 0 {
		var err error
		if next, err = fsm.Apply(img, img.Offset+1, img.Term, &keelpb.RecordBatch{Records: regs}); err != nil {
			return nil, err
		}
	}
	recs, err := featureLevelRecords(next, level, downgrade)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return append(regs, recs...), nil
}

// controllerRegistrationRecords decides the ControllerRegistration records
// that make img's registrations match the voters' ranges: none below
// metadata.version 2, which introduced them, none for a voter that did not
// answer, and none for one that cannot read the finalized level (it is
// refused: its own state machine would stop at the log's level anyway).
// skipped names the voters left out for the last reason.
func controllerRegistrationRecords(img *fsm.Image, voters []FeatureNode) (recs []*keelpb.Record, skipped []string) {
	return registrationsAt(img, img.FinalizedMetadataVersion(), voters)
}

// registrationsAt is controllerRegistrationRecords for a batch that leaves
// the level at level (a new cluster's first batch sets it).
func registrationsAt(img *fsm.Image, level uint32, voters []FeatureNode) (recs []*keelpb.Record, skipped []string) {
	if level < 2 {
		return nil, nil
	}
	for _, v := range voters {
		if v.Err != "" {
			continue
		}
		if !v.supports(level) {
			skipped = append(skipped, fmt.Sprintf("controller %d supports %d-%d, the cluster is at %d", v.ID, v.Min, v.Max, level))
			continue
		}
		if r, ok := img.Controller(v.ID); ok && r.Address == v.Address && r.MinMetadataVersion == v.Min && r.MaxMetadataVersion == v.Max {
			continue
		}
		recs = append(recs, &keelpb.Record{Record: &keelpb.Record_ControllerRegistration{ControllerRegistration: &keelpb.ControllerRegistrationRecord{
			NodeId: v.ID, Address: v.Address, MinMetadataVersion: v.Min, MaxMetadataVersion: v.Max}}})
	}
	return recs, skipped
}

// askVoters starts asking the voters for their ranges, for the takeover's
// batch: the takeover registers every voter that has answered by the time
// it writes its epoch record, so that a new cluster's registrations are in
// its first batch rather than in writes that follow it.
func (l *leadership) askVoters() <-chan []FeatureNode {
	out := make(chan []FeatureNode, 1)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		voters, err := l.c.voterRanges(l.ctx)
		if err != nil {
			voters = nil
		}
		out <- voters
	}()
	return out
}

// takeoverRegistrations are the controller registrations the takeover's
// batch carries: on a new cluster it waits for every voter's answer (the
// voters are starting together, and no writes wait on this takeover yet);
// otherwise it takes the answers already in, and registerControllers
// writes the rest, since a failover must not wait for a voter that may be
// the dead leader.
func (l *leadership) takeoverRegistrations(img *fsm.Image, asked <-chan []FeatureNode) []*keelpb.Record {
	level := img.FinalizedMetadataVersion()
	var voters []FeatureNode
	if img.ClusterID == "" {
		level = l.c.cfg.InitialMetadataVersion
		select {
		case voters = <-asked:
		case <-l.ctx.Done():
		}
	} else {
		select {
		case voters = <-asked:
		default:
		}
	}
	recs, _ := registrationsAt(img, level, voters)
	return recs
}

// kickRegistrations has registerControllers ask the voters again now.
func (l *leadership) kickRegistrations() {
	select {
	case l.registerKick <- struct{}{}:
	default:
	}
}

// registerControllers keeps the controller registrations true while this
// leadership lasts (KIP-919: Keel's active controller asks each voter
// instead of each voter sending its registration): after the takeover,
// after a change of level, and every controllerRegisterRefresh, sooner
// while a voter has not answered.
func (l *leadership) registerControllers() {
	defer l.wg.Done()
	for {
		wait := controllerRegisterRefresh
		if !l.registerOnce() {
			wait = controllerRegisterRetry
		}
		timer := time.NewTimer(wait)
		select {
		case <-l.ctx.Done():
			timer.Stop()
			return
		case <-l.registerKick:
			timer.Stop()
		case <-timer.C:
		}
	}
}

// registerOnce asks the voters and writes the registrations that changed;
// it reports whether every voter answered and was written.
func (l *leadership) registerOnce() bool {
	if l.c.fsm.Image().FinalizedMetadataVersion() < 2 {
		return true
	}
	voters, err := l.c.voterRanges(l.ctx)
	if err != nil {
		return false
	}
	complete := true
	for _, v := range voters {
		if v.Err != "" {
			complete = false
		}
	}
	var skipped []string
	index, err := l.decide(l.ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		var recs []*keelpb.Record
		recs, skipped = controllerRegistrationRecords(img, voters)
		return recs, nil
	})
	switch {
	case err != nil:
		if l.ctx.Err() == nil {
			l.log.Warn("registering the controllers' metadata versions failed", "err", err)
		}
		return false
	case index > 0:
		l.log.Info("controller registrations written", "index", index)
	}
	for _, s := range skipped {
		l.log.Error("controller not registered: it cannot read the cluster's metadata.version", "reason", s)
	}
	return complete && len(skipped) == 0
}
