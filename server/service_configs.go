package server

import (
	"context"

	"github.com/keel-dev/keel/controller"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
)

// IncrementalAlterConfigs sets and deletes configs of a topic or of the
// cluster defaults, and answers the resource's effective configs after.
func (s *controllerService) IncrementalAlterConfigs(ctx context.Context, req *keelpb.IncrementalAlterConfigsRequest) (*keelpb.IncrementalAlterConfigsResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	done, err := s.ctrl.AlterConfigs(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &keelpb.IncrementalAlterConfigsResponse{}
	configs, err := effectiveConfigs(done.Image, req.GetResource())
	if err != nil {
		return nil, toStatus(err)
	}
	resp.Configs = configs
	for _, e := range done.Elections {
		resp.Elections = append(resp.Elections, &keelpb.ElectionResult{Topic: e.Topic, Partition: e.Partition, Leader: e.Leader})
	}
	return resp, nil
}

// AlterClientQuotas sets and removes client quotas; each entry's result
// carries its error, if any.
func (s *controllerService) AlterClientQuotas(ctx context.Context, req *keelpb.AlterClientQuotasRequest) (*keelpb.AlterClientQuotasResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.writeTimeout)
	defer cancel()
	errs, offset, err := s.ctrl.AlterClientQuotas(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &keelpb.AlterClientQuotasResponse{Results: make([]*keelpb.ClientQuotaResult, len(errs)), Offset: offset}
	for i, e := range errs {
		resp.Results[i] = &keelpb.ClientQuotaResult{Error: e}
	}
	return resp, nil
}

// DescribeConfigs answers a resource's effective configs, as ListTopics
// answers: from the active controller's image, its confirmed one, or with
// stale this node's.
func (s *controllerService) DescribeConfigs(ctx context.Context, req *keelpb.DescribeConfigsRequest) (*keelpb.DescribeConfigsResponse, error) {
	img, src, err := s.readImage(ctx, req.GetLinearizable(), req.GetStale())
	if err != nil {
		return nil, err
	}
	configs, err := effectiveConfigs(img, req.GetResource())
	if err != nil {
		return nil, toStatus(err)
	}
	return &keelpb.DescribeConfigsResponse{Configs: configs, Source: src}, nil
}

// effectiveConfigs renders a resource's configs in effect from img.
func effectiveConfigs(img *fsm.Image, r *keelpb.ConfigResource) ([]*keelpb.ConfigEntry, error) {
	if r.GetType() == keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC {
		t, ok := img.Topic(r.GetName())
		if !ok {
			return nil, controller.UnknownTopic(r.GetName())
		}
		return configEntries(img.TopicConfigs(t)), nil
	}
	return configEntries(img.ClusterDefaults()), nil
}

// configEntries renders configs in effect for the API.
func configEntries(vals []fsm.ConfigValue) []*keelpb.ConfigEntry {
	out := make([]*keelpb.ConfigEntry, len(vals))
	for i, v := range vals {
		out[i] = &keelpb.ConfigEntry{Name: v.Name, Value: v.Value, Source: configSource(v.Source)}
	}
	return out
}

func configSource(s fsm.ConfigSource) keelpb.ConfigSource {
	switch s {
	case fsm.SourceTopic:
		return keelpb.ConfigSource_CONFIG_SOURCE_TOPIC
	case fsm.SourceClusterDefault:
		return keelpb.ConfigSource_CONFIG_SOURCE_CLUSTER_DEFAULT
	case fsm.SourceDefault:
		return keelpb.ConfigSource_CONFIG_SOURCE_DEFAULT
	}
	return keelpb.ConfigSource_CONFIG_SOURCE_UNSPECIFIED
}
