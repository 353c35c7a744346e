package controller

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// The configuration manager: a pure function from the committed image and
// an IncrementalAlterConfigs request to records (Kafka's
// ConfigurationControlManager.incrementalAlterConfigs), with the partition
// changes a config change brings about in KRaft: a topic that now allows
// unclean election gets leaders for its leaderless partitions (KRaft's
// maybeTriggerUncleanLeaderElectionForLeaderlessPartitions, here in the
// same decision), and a changed min.insync.replicas clears the eligible
// leader replicas of exactly the topics whose value in effect it changes
// (KIP-966: they were eligible under the old value only).

// ConfigAlteration is what an IncrementalAlterConfigs decision did, or
// would do.
type ConfigAlteration struct {
	// Image is the image with the change applied: the committed one after
	// it, or a private preview for a validate-only request.
	Image *fsm.Image
	// Elections are the partitions the change gave a leader.
	Elections []Election
}

// configResource is a request's resource, checked against the image.
type configResource struct {
	typ   keelpb.ConfigResourceType
	name  string
	topic *fsm.Topic // for a topic
}

func resolveResource(img *fsm.Image, r *keelpb.ConfigResource) (configResource, error) {
	res := configResource{typ: r.GetType(), name: r.GetName()}
	switch r.GetType() {
	case keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC:
		t, ok := img.Topic(r.GetName())
		if !ok {
			return res, fmt.Errorf("%w: topic %q", ErrUnknownTopic, r.GetName())
		}
		res.topic = t
	case keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER:
		if r.GetName() != "" {
			return res, fieldError("resource.name", "%q: the cluster defaults have no name", r.GetName())
		}
	default:
		return res, fieldError("resource.type", "%v is not topic or cluster", r.GetType())
	}
	return res, nil
}

// current returns the resource's own value of a config, if it has one.
func (res configResource) current(img *fsm.Image, name string) (string, bool) {
	if res.topic != nil {
		v, ok := res.topic.Configs[name]
		return v, ok
	}
	return img.ClusterConfig(name)
}

// topics lists the topics whose configs in effect the change of name on
// res can move: the topic itself, or, for a cluster default, every topic
// without its own value.
func (res configResource) topics(img *fsm.Image, name string) []*fsm.Topic {
	if res.topic != nil {
		return []*fsm.Topic{res.topic}
	}
	var out []*fsm.Topic
	for _, t := range img.Topics() {
		if _, own := t.Configs[name]; !own {
			out = append(out, t)
		}
	}
	return out
}

// configRecords turns a request's configs into ConfigRecords, one per
// config whose value changes, in the request's order: SET values in the
// canonical form fsm.CheckConfig gives, DELETE of an unset config nothing,
// APPEND and SUBTRACT the list's items added or taken out (Kafka's
// ConfigurationControlManager: from the resource's own value, else the
// built-in default). With replace, then, a delete of each of the
// resource's own configs not named, in name order (Kafka's legacy
// AlterConfigs).
func configRecords(img *fsm.Image, res configResource, configs []*keelpb.AlterableConfig, replace bool) ([]*keelpb.Record, map[string]bool, error) {
	var recs []*keelpb.Record
	changed := map[string]bool{}
	for i, c := range configs {
		field := fmt.Sprintf("configs[%d]", i)
		if slices.ContainsFunc(configs[:i], func(o *keelpb.AlterableConfig) bool { return o.GetName() == c.GetName() }) {
			return nil, nil, fieldError(field, "%s is named twice", c.GetName())
		}
		if replace && c.GetOp() != keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET {
			return nil, nil, fieldError(field+".op", "%v: replacing a resource's configs only sets them", c.GetOp())
		}
		old, had := res.current(img, c.GetName())
		rec := &keelpb.ConfigRecord{ResourceType: res.typ, ResourceName: res.name, Name: c.GetName()}
		switch c.GetOp() {
		case keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, keelpb.AlterConfigOp_ALTER_CONFIG_OP_APPEND, keelpb.AlterConfigOp_ALTER_CONFIG_OP_SUBTRACT:
			value := c.GetValue()
			if op := c.GetOp(); op != keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET {
				v, err := editList(c.GetName(), old, had, op, value)
				if err != nil {
					return nil, nil, fieldError(field, "%v", err)
				}
				value = v
			}
			check := fsm.CheckConfig
			if res.topic != nil {
				check = fsm.CheckTopicConfig
			}
			v, err := check(c.GetName(), value)
			if err != nil {
				return nil, nil, fieldError(field, "%v", err)
			}
			if had && old == v {
				continue
			}
			rec.Value = &v
		case keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE:
			if _, ok := fsm.LookupConfig(c.GetName()); !ok {
				_, err := fsm.CheckConfig(c.GetName(), "")
				return nil, nil, fieldError(field, "%v", err)
			}
			if !had {
				continue
			}
		default:
			return nil, nil, fieldError(field+".op", "%v is not set, delete, append or subtract", c.GetOp())
		}
		changed[c.GetName()] = true
		recs = append(recs, &keelpb.Record{Record: &keelpb.Record_Config{Config: rec}})
	}
	if replace {
		for _, d := range fsm.ConfigDefs() {
			named := slices.ContainsFunc(configs, func(c *keelpb.AlterableConfig) bool { return c.GetName() == d.Name })
			if _, had := res.current(img, d.Name); !had || named {
				continue
			}
			changed[d.Name] = true
			rec := &keelpb.ConfigRecord{ResourceType: res.typ, ResourceName: res.name, Name: d.Name}
			recs = append(recs, &keelpb.Record{Record: &keelpb.Record_Config{Config: rec}})
		}
	}
	return recs, changed, nil
}

// editList applies an APPEND or SUBTRACT of value's comma-separated items
// to a list config's value: the resource's own (old, when had), else the
// built-in default.
func editList(name, old string, had bool, op keelpb.AlterConfigOp, value string) (string, error) {
	d, ok := fsm.LookupConfig(name)
	if !ok {
		_, err := fsm.CheckConfig(name, value)
		return "", err
	}
	if d.Type != fsm.TypeList {
		return "", fmt.Errorf("%v: %s is a %s, not a list", op, name, d.Type)
	}
	if !had {
		old = d.Default
	}
	items := splitList(old)
	for _, item := range splitList(value) {
		switch i := slices.Index(items, item); {
		case op == keelpb.AlterConfigOp_ALTER_CONFIG_OP_APPEND && i < 0:
			items = append(items, item)
		case op == keelpb.AlterConfigOp_ALTER_CONFIG_OP_SUBTRACT && i >= 0:
			items = slices.Delete(items, i, i+1)
		}
	}
	return strings.Join(items, ","), nil
}

// splitList splits a list config's value into its items, trimmed, without
// empty ones.
func splitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// alterConfigsRecords decides an IncrementalAlterConfigs request, all or
// nothing. Its records come in the order that keeps every prefix valid
// should raft take them in several entries: first the ELR clears a
// changed min.insync.replicas calls for (clearing is always safe), then the
// ConfigRecords, then the elections that unclean.leader.election.enable
// now allows (which the next active controller's leaderless election would
// make anyway, should they be lost). It returns the records, the image
// they lead to, and the elections.
func alterConfigsRecords(img *fsm.Image, req *keelpb.IncrementalAlterConfigsRequest) ([]*keelpb.Record, *fsm.Image, []Election, error) {
	res, err := resolveResource(img, req.GetResource())
	if err != nil {
		return nil, nil, nil, err
	}
	configs, changed, err := configRecords(img, res, req.GetConfigs(), req.GetReplace())
	if err != nil || len(configs) == 0 {
		return nil, img, nil, err
	}

	var recs []*keelpb.Record
	if changed[fsm.MinInsyncReplicas] {
		// Only a topic whose value in effect changes loses its ELR: a
		// cluster default set to what a topic already had (the built-in
		// one, say), or a topic's own value set or deleted to what it
		// had from the default, leaves the rule its ELR was built under
		// as it was.
		after, err := fsm.Apply(img, img.Offset+1, img.Term, &keelpb.RecordBatch{Records: configs})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%w; nothing was written: %w", ErrRefused, err)
		}
		for _, t := range res.topics(img, fsm.MinInsyncReplicas) {
			if nt, ok := after.TopicByID(t.ID); ok && after.MinISR(nt) == img.MinISR(t) {
				continue
			}
			for _, p := range img.Partitions(t.ID) {
				if len(p.ELR()) == 0 {
					continue
				}
				r := &keelpb.PartitionChangeRecord{TopicId: bytes.Clone(t.ID[:]), Partition: p.Partition,
					EligibleLeaderReplicas: &keelpb.Int32List{}}
				recs = append(recs, &keelpb.Record{Record: &keelpb.Record_PartitionChange{PartitionChange: r}})
			}
		}
	}
	recs = append(recs, configs...)
	next, err := fsm.Apply(img, img.Offset+1, img.Term, &keelpb.RecordBatch{Records: recs})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w; nothing was written: %w", ErrRefused, err)
	}

	var elections []Election
	if changed[fsm.UncleanLeaderElection] {
		var more []*keelpb.Record
		v := newView(next)
		for _, t := range res.topics(img, fsm.UncleanLeaderElection) {
			if img.UncleanElection(t) {
				continue
			}
			nt, _ := next.TopicByID(t.ID)
			if !next.UncleanElection(nt) {
				continue
			}
			for _, p := range next.Partitions(t.ID) {
				if p.HasLeader() {
					continue
				}
				tg := sharedTarget(p)
				tg.minISR = next.MinISR(nt)
				electLeader(&tg, v, true)
				if r := changeRecord(p, tg); r != nil && tg.leader != fsm.NoLeader {
					more = append(more, r)
					elections = append(elections, Election{Topic: t.Name, Partition: p.Partition, Leader: tg.leader})
				}
			}
		}
		if len(more) > 0 {
			if next, err = fsm.Apply(next, next.Offset, next.Term, &keelpb.RecordBatch{Records: more}); err != nil {
				return nil, nil, nil, fmt.Errorf("%w; nothing was written: %w", ErrRefused, err)
			}
			recs = append(recs, more...)
		}
	}
	return recs, next, elections, nil
}

// AlterConfigs sets and deletes configs of a topic or of the cluster
// defaults (IncrementalAlterConfigs), with the elections and ELR clears the
// change brings about, in one decision, which the event loop applies to its
// speculative image before raft sees it, as every decision. With
// validate_only it decides on the active controller's committed image,
// confirmed as a linearizable read's (ReadImage), applies the records to a
// private copy of it, and writes nothing. Errors:
// a *FieldError naming the bad config, ErrUnknownTopic, ErrRefused for
// records the state machine would refuse, and decide's.
func (c *Controller) AlterConfigs(ctx context.Context, req *keelpb.IncrementalAlterConfigsRequest) (*ConfigAlteration, error) {
	if req.GetValidateOnly() {
		img, err := c.ReadImage(ctx)
		if err != nil {
			return nil, err
		}
		_, next, elections, err := alterConfigsRecords(img, req)
		if err != nil {
			return nil, err
		}
		return &ConfigAlteration{Image: next, Elections: elections}, nil
	}
	var elections []Election
	_, err := c.decide(ctx, func(img *fsm.Image) ([]*keelpb.Record, error) {
		recs, _, e, err := alterConfigsRecords(img, req)
		elections = e
		return recs, err
	})
	if err != nil {
		return nil, err
	}
	c.log.Info("configs altered", "resource_type", req.GetResource().GetType().String(), "resource", req.GetResource().GetName(),
		"configs", len(req.GetConfigs()), "replace", req.GetReplace(), "principal", req.GetPrincipal(), "elections", len(elections))
	return &ConfigAlteration{Image: c.fsm.Image(), Elections: elections}, nil
}
