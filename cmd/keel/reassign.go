package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-dev/keel/cmd/keel/internal/reassign"
	"github.com/keel-dev/keel/fsm"
	"github.com/keel-dev/keel/proto/keelpb"
	"github.com/keel-dev/keel/rpc"
)

// The plan forms of `keel partition reassign` (--plan, --generate,
// --verify) and `keel broker drain`: they read the cluster, build or check
// a plan with package reassign, and send it as one request, which the
// active controller accepts or refuses whole.

// readPlanFile reads and checks a plan file, naming the file in a refusal.
func readPlanFile(flag, path string) (reassign.Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return reassign.Plan{}, fmt.Errorf("%s: %w", flag, err)
	}
	p, err := reassign.ParsePlan(data)
	if err != nil {
		return reassign.Plan{}, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return p, nil
}

// stateOf is a described partition as package reassign takes it.
func stateOf(topic string, p *keelpb.PartitionDescription) reassign.State {
	return reassign.State{Topic: topic, Partition: p.GetPartition(), Leader: p.GetLeader(),
		Replicas: p.GetReplicas(), ISR: p.GetIsr(), Adding: p.GetAddingReplicas(), Removing: p.GetRemovingReplicas()}
}

// readStates reads the partitions of topics from the active controller
// (every topic when topics is nil). A topic named but missing is an error
// when mustExist, and left out otherwise.
func readStates(ctx context.Context, c *rpc.Client, topics []string, mustExist bool) ([]reassign.State, error) {
	if topics == nil {
		resp, err := c.ListTopics(ctx, rpc.Linearizable())
		if err != nil {
			return nil, err
		}
		for _, t := range resp.GetTopics() {
			topics = append(topics, t.GetName())
		}
	}
	var out []reassign.State
	for _, name := range topics {
		d, err := c.DescribeTopic(ctx, name, rpc.Linearizable())
		if isNotFoundErr(err) && !mustExist {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, p := range d.GetTopic().GetPartitions() {
			out = append(out, stateOf(name, p))
		}
	}
	return out, nil
}

// readBrokers reads the registered brokers as the placement takes them.
func readBrokers(ctx context.Context, c *rpc.Client) ([]*fsm.Broker, error) {
	resp, err := c.ListBrokers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*fsm.Broker, 0, len(resp.GetBrokers()))
	for _, b := range resp.GetBrokers() {
		out = append(out, &fsm.Broker{ID: b.GetId(), Rack: b.GetRack(),
			Fenced: b.GetState() == fsm.BrokerFenced, ShuttingDown: b.GetState() == fsm.BrokerShuttingDown})
	}
	return out, nil
}

// planTopics are the topics a plan names, each once, in order.
func planTopics(p reassign.Plan) []string {
	var out []string
	for _, e := range p.Partitions {
		if !slices.Contains(out, e.Topic) {
			out = append(out, e.Topic)
		}
	}
	return out
}

// statesIn are the states of the partitions p names.
func statesIn(p reassign.Plan, states []reassign.State) []reassign.State {
	var out []reassign.State
	for _, s := range states {
		if slices.ContainsFunc(p.Partitions, func(e reassign.Partition) bool { return e.Topic == s.Topic && e.Partition == s.Partition }) {
			out = append(out, s)
		}
	}
	return out
}

// sendPlan starts (or, for entries without replicas, cancels) every move
// of plan in one request.
func sendPlan(ctx context.Context, c *rpc.Client, plan []*keelpb.ReassignmentTarget) ([]reassignView, error) {
	resp, err := c.AlterPartitionReassignments(ctx, &keelpb.AlterPartitionReassignmentsRequest{Partitions: plan})
	if err != nil {
		return nil, err
	}
	out := make([]reassignView, 0, len(resp.GetPartitions()))
	for _, p := range resp.GetPartitions() {
		if p.GetPartition() != nil {
			out = append(out, reassignView{Topic: p.GetTopic(), partitionRow: partitionView(p.GetPartition())})
		}
	}
	return out, nil
}

func targetsOf(p reassign.Plan) []*keelpb.ReassignmentTarget {
	out := make([]*keelpb.ReassignmentTarget, len(p.Partitions))
	for i, e := range p.Partitions {
		out[i] = &keelpb.ReassignmentTarget{Topic: e.Topic, Partition: e.Partition, Replicas: e.Replicas}
	}
	return out
}

// cancelOngoing cancels, in one request, every ongoing move that want
// picks. A move may complete between the listing and the cancel, which
// refuses the whole request (NO_REASSIGNMENT_IN_PROGRESS): then it lists
// again and retries, a few times.
func cancelOngoing(ctx context.Context, c *rpc.Client, want func(*keelpb.Reassignment) bool) ([]string, error) {
	for attempt := 0; ; attempt++ {
		resp, err := c.ListPartitionReassignments(ctx)
		if err != nil {
			return nil, err
		}
		var plan []*keelpb.ReassignmentTarget
		var names []string
		for _, r := range resp.GetReassignments() {
			if want(r) {
				plan = append(plan, &keelpb.ReassignmentTarget{Topic: r.GetTopic(), Partition: r.GetPartition()})
				names = append(names, fmt.Sprintf("%s-%d", r.GetTopic(), r.GetPartition()))
			}
		}
		if len(plan) == 0 {
			return []string{}, nil
		}
		_, err = sendPlan(ctx, c, plan)
		if rpc.ReasonOf(err) == rpc.ReasonNoReassignmentInProgress && attempt < 5 {
			continue
		}
		if err != nil {
			return nil, err
		}
		slices.Sort(names)
		return names, nil
	}
}

// planRunView is what `keel partition reassign --plan -o json` prints: the
// current assignment of the plan's partitions (to roll back to) and each
// partition once the plan was accepted.
type planRunView struct {
	Current    reassign.Plan  `json:"current"`
	Partitions []reassignView `json:"partitions"`
}

// runPlan starts the moves of a plan file in one request.
func runPlan(cmd *cobra.Command, a *adminFlags, path string, th *throttleFlag) error {
	plan, err := readPlanFile("--plan", path)
	if err != nil {
		return err
	}
	return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (planRunView, error) {
		states, err := readStates(ctx, c, planTopics(plan), true)
		if err != nil {
			return planRunView{}, err
		}
		current := reassign.Current(statesIn(plan, states))
		if err := th.set(ctx, c); err != nil {
			return planRunView{}, err
		}
		parts, err := sendPlan(ctx, c, targetsOf(plan))
		if err = th.started(ctx, c, err); err != nil {
			return planRunView{}, err
		}
		return planRunView{Current: current, Partitions: parts}, nil
	}, func(w io.Writer, v planRunView) error {
		names := make([]string, len(plan.Partitions))
		for i, e := range plan.Partitions {
			names[i] = e.Name()
		}
		fmt.Fprintf(w, "Current partition replica assignment\n\n%s\n\nSave this to use as the --plan file during rollback\n", v.Current)
		fmt.Fprintf(w, "Successfully started partition reassignments for %s\n\n", strings.Join(names, ","))
		rows := [][]string{append([]string{"TOPIC"}, partitionHeader...)}
		for _, p := range v.Partitions {
			rows = append(rows, append([]string{p.Topic}, partitionCells(p.partitionRow)...))
		}
		return printTable(w, rows)
	})
}

// cancelView is what the cancelling forms print with -o json.
type cancelView struct {
	Cancelled []string `json:"cancelled"`
}

// runPlanCancel cancels the ongoing moves of a plan file's partitions.
func runPlanCancel(cmd *cobra.Command, a *adminFlags, path string) error {
	plan, err := readPlanFile("--plan", path)
	if err != nil {
		return err
	}
	inPlan := map[string]bool{}
	for _, e := range plan.Partitions {
		inPlan[e.Name()] = true
	}
	return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (cancelView, error) {
		names, err := cancelOngoing(ctx, c, func(r *keelpb.Reassignment) bool {
			return inPlan[fmt.Sprintf("%s-%d", r.GetTopic(), r.GetPartition())]
		})
		return cancelView{Cancelled: names}, err
	}, func(w io.Writer, v cancelView) error {
		if len(v.Cancelled) == 0 {
			fmt.Fprintln(w, "None of the plan's partitions is being reassigned: nothing to cancel.")
			return nil
		}
		fmt.Fprintf(w, "Successfully cancelled partition reassignments for: %s\n", strings.Join(v.Cancelled, ","))
		return nil
	})
}

// generateView is what `keel partition reassign --generate -o json` prints.
type generateView struct {
	Current  reassign.Plan `json:"current"`
	Proposed reassign.Plan `json:"proposed"`
}

// runGenerate proposes a plan for topics over brokers, and writes nothing.
func runGenerate(cmd *cobra.Command, a *adminFlags, topicList, brokerList string) error {
	var topics []string
	for _, t := range strings.Split(topicList, ",") {
		if t = strings.TrimSpace(t); t != "" && !slices.Contains(topics, t) {
			topics = append(topics, t)
		}
	}
	if len(topics) == 0 {
		return errors.New("--generate needs --topics T1,T2,...: the topics to move")
	}
	if strings.TrimSpace(brokerList) == "" {
		return errors.New("--generate needs --brokers B1,B2,...: the brokers to move them to")
	}
	brokerIDs, err := parseReplicas(brokerList)
	if err != nil {
		return fmt.Errorf("--brokers: %w", err)
	}
	return adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) (generateView, error) {
		states, err := readStates(ctx, c, topics, true)
		if err != nil {
			return generateView{}, err
		}
		brokers, err := readBrokers(ctx, c)
		if err != nil {
			return generateView{}, err
		}
		proposed, err := reassign.Generate(brokers, brokerIDs, states)
		if err != nil {
			return generateView{}, fmt.Errorf("--brokers %s: %w", brokerList, err)
		}
		return generateView{Current: reassign.Current(states), Proposed: proposed}, nil
	}, func(w io.Writer, v generateView) error {
		_, err := fmt.Fprintf(w, "Current partition replica assignment\n%s\n\nProposed partition reassignment configuration\n%s\n", v.Current, v.Proposed)
		return err
	})
}

// errNotComplete is --verify's failure once it has printed the states: the
// exit status is 1 while any partition of the plan is not where it goes.
type errNotComplete struct{ notDone, total int }

func (e errNotComplete) Error() string {
	return fmt.Sprintf("%d of %d partitions of the plan are not complete", e.notDone, e.total)
}

// runVerify reports each partition of a plan file: complete, still in
// progress, or different; it fails while any is not complete.
func runVerify(cmd *cobra.Command, a *adminFlags, path string) error {
	plan, err := readPlanFile("--verify", path)
	if err != nil {
		return err
	}
	notDone := 0
	err = adminCall(cmd, a, func(ctx context.Context, c *rpc.Client) ([]reassign.Status, error) {
		states, err := readStates(ctx, c, planTopics(plan), false)
		if err != nil {
			return nil, err
		}
		out := reassign.Verify(plan, states)
		for _, s := range out {
			if s.State != reassign.Complete {
				notDone++
			}
		}
		return out, nil
	}, func(w io.Writer, v []reassign.Status) error {
		fmt.Fprintln(w, "Status of partition reassignment:")
		for _, s := range v {
			fmt.Fprintln(w, s.Message())
		}
		return nil
	})
	if err == nil && notDone > 0 {
		return errNotComplete{notDone: notDone, total: len(plan.Partitions)}
	}
	return err
}

// isNotFoundErr reports a NotFound status (an unknown topic).
func isNotFoundErr(err error) bool {
	return err != nil && status.Code(err) == codes.NotFound
}
