package kafka

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// Kafka's config APIs (DescribeConfigs, AlterConfigs,
// IncrementalAlterConfigs) over the configs the controllers hold: a
// topic's own, and the cluster-wide defaults, which Kafka clients reach as
// the BROKER resource with an empty name under the broker's names for them
// (log.retention.ms for retention.ms), as in KRaft. DescribeConfigs is
// answered from this broker's replayed image, as a KRaft broker answers it
// from its metadata cache; a change is checked here and forwarded to the
// active controller as one IncrementalAlterConfigs decision per resource,
// all or nothing, and answered once this broker's image shows it.

// clusterName is the name of Kafka's one CLUSTER resource.
const clusterName = "kafka-cluster"

// brokerSynonym is the broker config whose value is topic config d's
// cluster default (Kafka's ServerTopicConfigSynonyms, the first synonym of
// each: fsm.ConfigDef.Synonym). A config without one has no cluster
// default Kafka clients can name.
func brokerSynonym(d fsm.ConfigDef) (string, bool) { return d.Synonym, d.Synonym != "" }

// topicConfigOf returns the topic config whose cluster default the broker
// config name is.
func topicConfigOf(name string) (fsm.ConfigDef, bool) {
	for _, d := range fsm.ConfigDefs() {
		if d.Synonym != "" && d.Synonym == name {
			return d, true
		}
	}
	return fsm.ConfigDef{}, false
}

// clusterDefaultNames lists the broker names of the cluster defaults Keel
// holds, for a refusal.
func clusterDefaultNames() string {
	var out []string
	for _, d := range fsm.ConfigDefs() {
		if b, ok := brokerSynonym(d); ok {
			out = append(out, b)
		}
	}
	return strings.Join(out, ", ")
}

// kafkaConfigType is Kafka's ConfigType of a Keel config type.
func kafkaConfigType(t fsm.ConfigType) kmsg.ConfigType {
	switch t {
	case fsm.TypeBoolean:
		return kmsg.ConfigTypeBoolean
	case fsm.TypeInt:
		return kmsg.ConfigTypeInt
	case fsm.TypeLong:
		return kmsg.ConfigTypeLong
	case fsm.TypeList:
		return kmsg.ConfigTypeList
	}
	if ct, err := kmsg.ParseConfigType(string(t)); err == nil {
		return ct
	}
	return kmsg.ConfigTypeUnknown
}

// configSource is Kafka's ConfigSource of a Keel one.
func configSource(src keelpb.ConfigSource) int8 {
	switch src {
	case keelpb.ConfigSource_CONFIG_SOURCE_TOPIC:
		return int8(kmsg.ConfigSourceDynamicTopicConfig)
	case keelpb.ConfigSource_CONFIG_SOURCE_CLUSTER_DEFAULT:
		return int8(kmsg.ConfigSourceDynamicDefaultBrokerConfig)
	}
	return int8(kmsg.ConfigSourceDefaultConfig)
}

// brokerID parses a BROKER resource's name, as Kafka does.
func brokerID(name string) (int32, error) {
	id, err := strconv.ParseInt(name, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("broker id must be an integer, but it is: %s", fsm.Truncate(name))
	}
	return int32(id), nil
}

// describeEntry is one config a DescribeConfigs answer lists, before the
// request's version and options shape it.
type describeEntry struct {
	name, value string
	source      kmsg.ConfigSource
	readOnly    bool
	synonyms    []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
	typ         kmsg.ConfigType
	doc         string
}

func synonym(name, value string, src kmsg.ConfigSource) kmsg.DescribeConfigsResponseResourceConfigConfigSynonym {
	s := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
	s.Name, s.Value, s.Source = name, &value, src
	return s
}

// topicEntries are topic t's configs: each with the sources it has, the
// first in effect (Kafka's ConfigHelper.createTopicConfigEntry): the
// topic's own value, the cluster default under its broker name, the
// built-in default under the same name.
func topicEntries(img *fsm.Image, t *fsm.Topic) []describeEntry {
	var out []describeEntry
	for _, d := range fsm.ConfigDefs() {
		if d.Broker {
			continue // no topic takes it
		}
		e := describeEntry{name: d.Name, typ: kafkaConfigType(d.Type), doc: d.Doc}
		if v, ok := t.Configs[d.Name]; ok {
			e.synonyms = append(e.synonyms, synonym(d.Name, v, kmsg.ConfigSourceDynamicTopicConfig))
		}
		e.synonyms = append(e.synonyms, defaultSynonyms(img, d)...)
		e.value, e.source = *e.synonyms[0].Value, e.synonyms[0].Source
		out = append(out, e)
	}
	return out
}

// defaultSynonyms are topic config d's defaults as a broker has them,
// under its broker name: the cluster-wide one if set, then the built-in.
// A config with no broker name has its built-in default under its own.
func defaultSynonyms(img *fsm.Image, d fsm.ConfigDef) []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym {
	name, ok := brokerSynonym(d)
	if !ok {
		return []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{synonym(d.Name, d.Default, kmsg.ConfigSourceDefaultConfig)}
	}
	var out []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym
	if v, ok := img.ClusterConfig(d.Name); ok {
		out = append(out, synonym(name, v, kmsg.ConfigSourceDynamicDefaultBrokerConfig))
	}
	return append(out, synonym(name, d.Default, kmsg.ConfigSourceDefaultConfig))
}

// brokerDoc is the doc line of d under its broker name.
func brokerDoc(d fsm.ConfigDef) string {
	if d.Broker {
		return d.Doc
	}
	return "the cluster-wide default of the topic config " + d.Name + ": " + d.Doc
}

// brokerEntries are a broker's configs: the cluster defaults under their
// broker names (the cluster-wide ones alone, set, for the empty name: the
// dynamic defaults, as KRaft's broker answers), and for this broker's own
// id also the settings it was started with, read-only.
func (s *Server) brokerEntries(img *fsm.Image, perBroker bool) []describeEntry {
	var out []describeEntry
	for _, d := range fsm.ConfigDefs() {
		name, ok := brokerSynonym(d)
		if !ok {
			continue
		}
		syns := defaultSynonyms(img, d)
		if !perBroker {
			if syns[0].Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig {
				continue
			}
			syns = syns[:1]
		}
		out = append(out, describeEntry{name: name, value: *syns[0].Value, source: syns[0].Source, synonyms: syns,
			typ: kafkaConfigType(d.Type), doc: brokerDoc(d)})
	}
	if !perBroker {
		return out
	}
	static := func(name string, value int64, typ kmsg.ConfigType, doc string) {
		v := strconv.FormatInt(value, 10)
		out = append(out, describeEntry{name: name, value: v, source: kmsg.ConfigSourceStaticBrokerConfig, readOnly: true,
			synonyms: []kmsg.DescribeConfigsResponseResourceConfigConfigSynonym{synonym(name, v, kmsg.ConfigSourceStaticBrokerConfig)},
			typ:      typ, doc: doc})
	}
	static("node.id", int64(s.cfg.BrokerID), kmsg.ConfigTypeInt, "this broker's id (keel broker --broker-id)")
	static("broker.id", int64(s.cfg.BrokerID), kmsg.ConfigTypeInt, "this broker's id (keel broker --broker-id)")
	static("socket.request.max.bytes", int64(s.cfg.MaxRequestSize), kmsg.ConfigTypeInt, "the largest request frame the Kafka listener reads")
	static("queued.max.request.bytes", s.cfg.QueuedMaxRequestBytes, kmsg.ConfigTypeLong, "the request bytes the Kafka listener holds unanswered, for produce requests and again for the others")
	static("connections.max.idle.ms", s.cfg.IdleTimeout.Milliseconds(), kmsg.ConfigTypeLong, "how long an idle client connection is kept")
	return out
}

func (s *Server) describeConfigs(c *conn, r *kmsg.DescribeConfigsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	img := s.cfg.Image.Image()
	for _, rr := range r.Resources {
		out := kmsg.NewDescribeConfigsResponseResource()
		out.ResourceType, out.ResourceName = rr.ResourceType, rr.ResourceName
		fail := func(ke *kerr.Error, msg string) {
			out.ErrorCode = ke.Code
			out.ErrorMessage = &msg
			resp.Resources = append(resp.Resources, out)
		}
		var entries []describeEntry
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			if !s.allowed(c, kmsg.ACLOperationDescribeConfigs, kmsg.ACLResourceTypeTopic, rr.ResourceName) {
				fail(kerr.TopicAuthorizationFailed, "describing a topic's configs needs DESCRIBE_CONFIGS on it")
				continue
			}
			if err := fsm.CheckTopicName(rr.ResourceName); err != nil {
				fail(kerr.InvalidTopicException, err.Error())
				continue
			}
			t, ok := img.Topic(rr.ResourceName)
			if !ok {
				out.ErrorCode = kerr.UnknownTopicOrPartition.Code
				resp.Resources = append(resp.Resources, out)
				continue
			}
			entries = topicEntries(img, t)
		case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
			if !s.allowed(c, kmsg.ACLOperationDescribeConfigs, kmsg.ACLResourceTypeCluster, clusterName) {
				fail(kerr.ClusterAuthorizationFailed, "describing a broker's configs needs DESCRIBE_CONFIGS on the cluster")
				continue
			}
			if rr.ResourceType == kmsg.ConfigResourceTypeBrokerLogger {
				fail(kerr.InvalidRequest, "Keel's brokers have no runtime log levels (BROKER_LOGGER); they log at their --log-level")
				continue
			}
			perBroker := rr.ResourceName != ""
			if perBroker {
				id, err := brokerID(rr.ResourceName)
				if err == nil && id != s.cfg.BrokerID {
					err = fmt.Errorf("unexpected broker id, expected %d or empty string, but received %s", s.cfg.BrokerID, rr.ResourceName)
				}
				if err != nil {
					fail(kerr.InvalidRequest, err.Error())
					continue
				}
			}
			entries = s.brokerEntries(img, perBroker)
		default:
			fail(kerr.InvalidRequest, fmt.Sprintf("unsupported resource type %d: Keel has the configs of topics (2) and brokers (4)", rr.ResourceType))
			continue
		}
		for _, e := range entries {
			if len(rr.ConfigNames) > 0 && !slices.Contains(rr.ConfigNames, e.name) {
				continue
			}
			out.Configs = append(out.Configs, e.render(r))
		}
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

// render shapes e for r's version and options.
func (e describeEntry) render(r *kmsg.DescribeConfigsRequest) kmsg.DescribeConfigsResponseResourceConfig {
	cfg := kmsg.NewDescribeConfigsResponseResourceConfig()
	value := e.value
	cfg.Name, cfg.Value, cfg.Source, cfg.ReadOnly = e.name, &value, e.source, e.readOnly
	// v0 has no source: IsDefault stands for it.
	cfg.IsDefault = e.source == kmsg.ConfigSourceDefaultConfig
	if r.IncludeSynonyms {
		cfg.ConfigSynonyms = e.synonyms
	}
	cfg.ConfigType = e.typ
	if r.IncludeDocumentation {
		doc := e.doc
		cfg.Documentation = &doc
	}
	return cfg
}

// alteration is one resource of an AlterConfigs or IncrementalAlterConfigs
// request, in Keel's terms.
type alteration struct {
	typ     kmsg.ConfigResourceType
	name    string
	configs []*keelpb.AlterableConfig
	// replace: AlterConfigs, which sets the resource's whole set.
	replace bool
	// refused is a refusal found while reading the request.
	refused *alterResult
}

// add adds a config to change; a value to set that is null refuses the
// resource, as in Kafka.
func (a *alteration) add(name string, op keelpb.AlterConfigOp, value *string) {
	ac := &keelpb.AlterableConfig{Name: name, Op: op}
	switch {
	case op == keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE:
	case value == nil:
		a.refuse(failed(kerr.InvalidRequest, "null value not supported for: %s", fsm.Truncate(name)))
	default:
		ac.Value = *value
	}
	a.configs = append(a.configs, ac)
}

// refuse notes the first refusal.
func (a *alteration) refuse(r alterResult) {
	if a.refused == nil {
		a.refused = &r
	}
}

// alterResult is a resource's outcome: 0 and no message on success.
type alterResult struct {
	code int16
	msg  *string
}

func failed(ke *kerr.Error, format string, args ...any) alterResult {
	msg := fmt.Sprintf(format, args...)
	return alterResult{code: ke.Code, msg: &msg}
}

// incrementalOps are Kafka's IncrementalAlterConfigs operations in Keel's
// terms.
var incrementalOps = map[kmsg.IncrementalAlterConfigOp]keelpb.AlterConfigOp{
	kmsg.IncrementalAlterConfigOpSet:      keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET,
	kmsg.IncrementalAlterConfigOpDelete:   keelpb.AlterConfigOp_ALTER_CONFIG_OP_DELETE,
	kmsg.IncrementalAlterConfigOpAppend:   keelpb.AlterConfigOp_ALTER_CONFIG_OP_APPEND,
	kmsg.IncrementalAlterConfigOpSubtract: keelpb.AlterConfigOp_ALTER_CONFIG_OP_SUBTRACT,
}

func (s *Server) incrementalAlterConfigs(ctx context.Context, c *conn, r *kmsg.IncrementalAlterConfigsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	alts := make([]alteration, len(r.Resources))
	for i, rr := range r.Resources {
		alts[i] = alteration{typ: rr.ResourceType, name: rr.ResourceName}
		for _, cfg := range rr.Configs {
			op, ok := incrementalOps[cfg.Op]
			if !ok {
				alts[i].refuse(failed(kerr.InvalidRequest, "unknown operation %d for %s: want SET (0), DELETE (1), APPEND (2) or SUBTRACT (3)", cfg.Op, fsm.Truncate(cfg.Name)))
			}
			alts[i].add(cfg.Name, op, cfg.Value)
		}
	}
	for i, res := range s.alterConfigs(ctx, c, alts, r.ValidateOnly) {
		out := kmsg.NewIncrementalAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = r.Resources[i].ResourceType, r.Resources[i].ResourceName
		out.ErrorCode, out.ErrorMessage = res.code, res.msg
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

func (s *Server) legacyAlterConfigs(ctx context.Context, c *conn, r *kmsg.AlterConfigsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.AlterConfigsResponse)
	alts := make([]alteration, len(r.Resources))
	for i, rr := range r.Resources {
		alts[i] = alteration{typ: rr.ResourceType, name: rr.ResourceName, replace: true}
		for _, cfg := range rr.Configs {
			alts[i].add(cfg.Name, keelpb.AlterConfigOp_ALTER_CONFIG_OP_SET, cfg.Value)
		}
	}
	for i, res := range s.alterConfigs(ctx, c, alts, r.ValidateOnly) {
		out := kmsg.NewAlterConfigsResponseResource()
		out.ResourceType, out.ResourceName = r.Resources[i].ResourceType, r.Resources[i].ResourceName
		out.ErrorCode, out.ErrorMessage = res.code, res.msg
		resp.Resources = append(resp.Resources, out)
	}
	return resp
}

// alterConfigs checks and forwards each resource's change, as Kafka's
// ConfigAdminManager.preprocess and then the controller do: a resource
// named twice refuses both, a config named twice, an unknown resource
// type or an unauthorized one refuses its resource; every other resource
// is decided on its own, all its configs or none.
func (s *Server) alterConfigs(ctx context.Context, c *conn, alts []alteration, validateOnly bool) []alterResult {
	ctx, cancel := context.WithTimeout(ctx, defaultAdminTimeout)
	defer cancel()
	type key struct {
		typ  kmsg.ConfigResourceType
		name string
	}
	seen := map[key]int{}
	for _, a := range alts {
		seen[key{a.typ, a.name}]++
	}
	out := make([]alterResult, len(alts))
	for i, a := range alts {
		switch {
		case seen[key{a.typ, a.name}] > 1:
			out[i] = failed(kerr.InvalidRequest, "each resource must appear at most once")
		case a.refused != nil:
			out[i] = *a.refused
		default:
			out[i] = s.alterResource(ctx, c, a, validateOnly)
		}
		if out[i].code != 0 {
			s.log.Debug("config change refused", "resource_type", a.typ.String(), "resource", fsm.Truncate(a.name),
				"principal", c.principal, "error", kerr.ErrorForCode(out[i].code), "why", *out[i].msg)
		}
	}
	return out
}

// alterResource decides one resource's change.
func (s *Server) alterResource(ctx context.Context, c *conn, a alteration, validateOnly bool) alterResult {
	for i, cfg := range a.configs {
		for _, o := range a.configs[:i] {
			if o.GetName() == cfg.GetName() {
				return failed(kerr.InvalidRequest, "error due to duplicate config keys: %s is named twice", fsm.Truncate(cfg.GetName()))
			}
		}
	}
	req := &keelpb.IncrementalAlterConfigsRequest{Configs: a.configs, ValidateOnly: validateOnly, Principal: c.principal, Replace: a.replace}
	denied := kerr.ClusterAuthorizationFailed
	switch a.typ {
	case kmsg.ConfigResourceTypeTopic:
		if !s.allowed(c, kmsg.ACLOperationAlterConfigs, kmsg.ACLResourceTypeTopic, a.name) {
			return failed(kerr.TopicAuthorizationFailed, "altering a topic's configs needs ALTER_CONFIGS on it")
		}
		if a.name == "" {
			return failed(kerr.InvalidRequest, "a topic resource needs a topic's name: Kafka has no default topic resource")
		}
		if err := fsm.CheckTopicName(a.name); err != nil {
			return failed(kerr.InvalidTopicException, "%v", err)
		}
		req.Resource = &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC, Name: a.name}
		denied = kerr.TopicAuthorizationFailed
	case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
		if !s.allowed(c, kmsg.ACLOperationAlterConfigs, kmsg.ACLResourceTypeCluster, clusterName) {
			return failed(kerr.ClusterAuthorizationFailed, "altering a broker's configs needs ALTER_CONFIGS on the cluster")
		}
		if a.typ == kmsg.ConfigResourceTypeBrokerLogger {
			return failed(kerr.InvalidRequest, "Keel's brokers have no runtime log levels (BROKER_LOGGER); they log at their --log-level")
		}
		if a.name != "" {
			id, err := brokerID(a.name)
			switch {
			case err != nil:
				return failed(kerr.InvalidRequest, "%v", err)
			case id != s.cfg.BrokerID:
				return failed(kerr.InvalidRequest, "unexpected broker id, expected %d or empty string, but received %s", s.cfg.BrokerID, a.name)
			}
			return failed(kerr.InvalidRequest, "Keel's brokers have no dynamic per-broker configs: alter the cluster-wide defaults (the BROKER resource with an empty name), or restart the broker with other flags")
		}
		// The cluster defaults, named as a broker names them.
		req.Resource = &keelpb.ConfigResource{Type: keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_CLUSTER}
		configs := make([]*keelpb.AlterableConfig, len(a.configs))
		for i, cfg := range a.configs {
			d, ok := topicConfigOf(cfg.GetName())
			if !ok {
				return failed(kerr.InvalidConfig, "%s is no cluster-wide default Keel holds; those are %s", fsm.Truncate(cfg.GetName()), clusterDefaultNames())
			}
			configs[i] = &keelpb.AlterableConfig{Name: d.Name, Op: cfg.GetOp(), Value: cfg.GetValue()}
		}
		req.Configs = configs
	default:
		return failed(kerr.InvalidRequest, "unsupported resource type %d: Keel has the configs of topics (2) and brokers (4)", a.typ)
	}
	if len(req.Configs) == 0 && !req.Replace {
		// Nothing to change: Kafka answers whether the resource exists.
		if _, ok := s.cfg.Image.Image().Topic(a.name); a.typ == kmsg.ConfigResourceTypeTopic && !ok {
			return failed(kerr.UnknownTopicOrPartition, "unknown topic %q", a.name)
		}
		return alterResult{}
	}
	if err := rpc.Validate(req); err != nil {
		return configError(err, denied)
	}
	resp, err := s.cfg.Controller.AlterConfigs(ctx, req)
	if err != nil {
		return configError(err, denied)
	}
	if !validateOnly {
		s.awaitConfigs(ctx, req.GetResource(), resp.GetConfigs())
	}
	return alterResult{}
}

// configError turns a refusal of a config change, the wire contract's or
// the controller's, into Kafka's error for it: INVALID_CONFIG for a config
// (its name or value), INVALID_REQUEST for the request's shape, and the
// authorization error of the resource's kind.
func configError(err error, denied *kerr.Error) alterResult {
	st := status.Convert(err)
	msg := st.Message()
	field, _, _ := rpc.BadFieldOf(err)
	switch {
	case st.Code() == codes.PermissionDenied:
		return alterResult{code: denied.Code, msg: &msg}
	case st.Code() == codes.InvalidArgument || st.Code() == codes.FailedPrecondition:
		switch {
		case strings.HasSuffix(field, ".op"), field == "configs", field == "principal":
			return alterResult{code: kerr.InvalidRequest.Code, msg: &msg}
		case strings.HasPrefix(field, "configs["):
			return alterResult{code: kerr.InvalidConfig.Code, msg: &msg}
		case strings.HasPrefix(field, "resource"):
			return alterResult{code: kerr.InvalidRequest.Code, msg: &msg}
		}
	}
	ke, msg := adminError(err)
	return alterResult{code: ke.Code, msg: &msg}
}

// awaitConfigs waits, briefly, for this broker's image to hold the
// resource's own configs as the controller answered them (the entries
// whose source is the resource itself), so that a DescribeConfigs here
// next reads the change. A timeout is no error: the change is committed,
// and this broker's image follows.
func (s *Server) awaitConfigs(ctx context.Context, res *keelpb.ConfigResource, after []*keelpb.ConfigEntry) {
	own := keelpb.ConfigSource_CONFIG_SOURCE_CLUSTER_DEFAULT
	if res.GetType() == keelpb.ConfigResourceType_CONFIG_RESOURCE_TYPE_TOPIC {
		own = keelpb.ConfigSource_CONFIG_SOURCE_TOPIC
	}
	want := map[string]string{}
	for _, e := range after {
		if e.GetSource() == own {
			want[e.GetName()] = e.GetValue()
		}
	}
	s.await(ctx, func(img *fsm.Image) bool {
		var have map[string]string
		if own == keelpb.ConfigSource_CONFIG_SOURCE_TOPIC {
			t, ok := img.Topic(res.GetName())
			if !ok {
				return true // deleted meanwhile
			}
			have = t.Configs
		} else {
			have = img.ClusterConfigs()
		}
		return maps.Equal(have, want)
	})
}
