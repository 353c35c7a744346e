package kafka

import (
	"context"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// Kafka's UpdateFeatures upgrade types (FeatureUpdate.UpgradeType).
const (
	upgradeTypeUpgrade       = 1
	upgradeTypeSafeDowngrade = 2
	upgradeTypeUnsafe        = 3
)

// addFeatures puts the features into an ApiVersions answer (v3+), as a
// KRaft broker does from its metadata image: the metadata.version levels
// this broker supports, as it registered them, and the finalized level,
// with the image's offset as the epoch of the finalized features.
func (s *Server) addFeatures(resp *kmsg.ApiVersionsResponse) {
	img := s.cfg.Image.Image()
	lo, hi := fsm.MinMetadataVersion, fsm.MaxMetadataVersion
	if b, ok := img.Broker(s.cfg.BrokerID); ok && b.MaxMetadataVersion > 0 {
		lo, hi = b.MinMetadataVersion, b.MaxMetadataVersion
	}
	resp.SupportedFeatures = []kmsg.ApiVersionsResponseSupportedFeature{{Name: fsm.MetadataVersionFeature, MinVersion: int16(lo), MaxVersion: int16(hi)}}
	level := int16(img.FinalizedMetadataVersion())
	resp.FinalizedFeatures = []kmsg.ApiVersionsResponseFinalizedFeature{{Name: fsm.MetadataVersionFeature, MinVersionLevel: level, MaxVersionLevel: level}}
	resp.FinalizedFeaturesEpoch = int64(min(img.Offset, math.MaxInt64))
}

// featureError is the Kafka error for the controller's refusal of a
// feature update: INVALID_UPDATE_VERSION for a level the cluster cannot
// take or a wrong direction, as Kafka's FeatureControlManager answers.
func featureError(err error) (*kerr.Error, string) {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition:
		if hint, _ := rpc.LeaderHintOf(err); hint == nil {
			return kerr.InvalidUpdateVersion, status.Convert(err).Message()
		}
	}
	return adminError(err)
}

// updateFeatures answers UpdateFeatures (v0-1) as Kafka's controller
// does: each feature update gets its own result. Keel finalizes one
// feature, metadata.version; its update is forwarded to the active
// controller, which checks the level against every node's range, and
// with validate_only writes nothing.
func (s *Server) updateFeatures(ctx context.Context, c *conn, r *kmsg.UpdateFeaturesRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.UpdateFeaturesResponse)
	if !s.allowed(c, kmsg.ACLOperationAlter, kmsg.ACLResourceTypeCluster, clusterResourceName) {
		msg := "updating features needs ALTER on the cluster"
		resp.ErrorCode, resp.ErrorMessage = kerr.ClusterAuthorizationFailed.Code, &msg
		return resp
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(r.TimeoutMillis))
	defer cancel()
	named := map[string]int{}
	for _, u := range r.FeatureUpdates {
		named[u.Feature]++
	}
	for _, u := range r.FeatureUpdates {
		if named[u.Feature] == 0 {
			continue
		}
		res := kmsg.NewUpdateFeaturesResponseResult()
		res.Feature = u.Feature
		if ke, msg := s.updateFeature(ctx, c, r, u, named[u.Feature]); ke != nil {
			res.ErrorCode, res.ErrorMessage = ke.Code, &msg
		}
		named[u.Feature] = 0 // answered once
		resp.Results = append(resp.Results, res)
	}
	return resp
}

// updateFeature checks and forwards one feature update named n times in
// the request; it returns nil on success.
func (s *Server) updateFeature(ctx context.Context, c *conn, r *kmsg.UpdateFeaturesRequest, u kmsg.UpdateFeaturesRequestFeatureUpdate, n int) (*kerr.Error, string) {
	typ := int8(upgradeTypeUpgrade)
	switch {
	case r.Version >= 1:
		typ = u.UpgradeType
	case u.AllowDowngrade:
		typ = upgradeTypeSafeDowngrade
	}
	switch {
	case n > 1:
		return kerr.InvalidRequest, "the feature is named more than once in the request"
	case u.Feature != fsm.MetadataVersionFeature:
		return kerr.InvalidUpdateVersion, fmt.Sprintf("the controller does not support feature %q: Keel finalizes %s only", u.Feature, fsm.MetadataVersionFeature)
	case typ != upgradeTypeUpgrade && typ != upgradeTypeSafeDowngrade && typ != upgradeTypeUnsafe:
		return kerr.InvalidUpdateVersion, fmt.Sprintf("unknown upgrade type %d: want 1 (upgrade), 2 (safe downgrade) or 3 (unsafe downgrade)", typ)
	case typ == upgradeTypeUnsafe:
		return kerr.InvalidUpdateVersion, "unsafe " + fsm.MetadataVersionFeature + " downgrades are not supported"
	case u.MaxVersionLevel < 1:
		return kerr.InvalidUpdateVersion, fmt.Sprintf("%s cannot be removed (level %d): the lowest level is %d", fsm.MetadataVersionFeature, u.MaxVersionLevel, fsm.MinMetadataVersion)
	}
	req := &keelpb.UpdateFeaturesRequest{MetadataVersion: uint32(u.MaxVersionLevel), Downgrade: typ == upgradeTypeSafeDowngrade,
		ValidateOnly: r.ValidateOnly, Principal: c.principal}
	if err := rpc.Validate(req); err != nil {
		return featureError(err)
	}
	if _, err := s.cfg.Controller.UpdateFeatures(ctx, req); err != nil {
		return featureError(err)
	}
	return nil, ""
}
