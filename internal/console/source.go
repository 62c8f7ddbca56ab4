package console

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/devicewarden/devicewarden/api"
	"github.com/devicewarden/devicewarden/internal/breaker"
	"github.com/devicewarden/devicewarden/internal/device"
	"github.com/devicewarden/devicewarden/internal/devicemsg"
)

// Device is one device workflow as visibility lists it: a device DeviceWarden acts on.
type Device struct {
	ID     device.ID
	State  devicemsg.State
	Node   string
	Forms  int
	Repair string
	// Cause is the standing quarantine's cause and the step it chose.
	Cause string
	Since time.Time
}

// Node is one node and the devices its ResourceSlices publish: a partitionable GPU is one device,
// its unit (device.Unit.Device), with its forms.
type Node struct {
	Name    string
	Pool    string
	Devices []device.ID
	// Forms are the forms of each unit among Devices (shared units only), and Labels name a
	// unit's cell (its whole form, or its first).
	Forms  map[device.ID][]device.ID
	Labels map[device.ID]string
}

// Flow is a running workflow other than a device's: a migration or a rollout.
type Flow struct {
	ID      string
	Started time.Time
	// Name, Phase and State are a rollout's search attributes.
	Name, Phase, State string
}

// Fleet reads what DeviceWarden keeps in Temporal.
type Fleet interface {
	Devices(ctx context.Context) ([]Device, error)
	// Running lists the running workflows of a type (api.MigrateWorkflow, api.RolloutWorkflow).
	Running(ctx context.Context, workflowType string) ([]Flow, error)
	State(ctx context.Context, id device.ID) (devicemsg.DeviceView, error)
	Breaker(ctx context.Context) (breaker.State, error)
}

// Cluster reads the nodes and the devices they publish.
type Cluster interface {
	Nodes(ctx context.Context) ([]Node, error)
}

// TemporalFleet is the Fleet of a Temporal namespace; Calls counts the requests it sent.
type TemporalFleet struct {
	Client    client.Client
	Namespace string
	Calls     atomic.Int64
}

// Devices lists every running device workflow, page by page.
func (f *TemporalFleet) Devices(ctx context.Context) ([]Device, error) {
	var out []Device
	var token []byte
	for {
		f.Calls.Add(1)
		resp, err := f.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: f.Namespace, Query: api.RunningDevicesQuery, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list device workflows: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			if d, ok := deviceOf(e); ok {
				out = append(out, d)
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out, nil
		}
	}
}

// Running lists the running workflows of a type, page by page.
func (f *TemporalFleet) Running(ctx context.Context, workflowType string) ([]Flow, error) {
	var out []Flow
	var token []byte
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running'", workflowType)
	for {
		f.Calls.Add(1)
		resp, err := f.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: f.Namespace, Query: query, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list %s workflows: %w", workflowType, err)
		}
		for _, e := range resp.GetExecutions() {
			attr := keyword(e)
			out = append(out, Flow{ID: e.GetExecution().GetWorkflowId(), Started: e.GetStartTime().AsTime(),
				Name: attr("RolloutName"), Phase: attr("RolloutPhase"), State: attr("RolloutState")})
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
			return out, nil
		}
	}
}

// keyword reads a workflow's Keyword search attributes ("" when unset).
func keyword(e *workflowpb.WorkflowExecutionInfo) func(string) string {
	fields := e.GetSearchAttributes().GetIndexedFields()
	return func(name string) string {
		var v string
		if p, ok := fields[name]; ok {
			_ = converter.GetDefaultDataConverter().FromPayload(p, &v)
		}
		return v
	}
}

// deviceOf reads a device workflow's search attributes.
func deviceOf(e *workflowpb.WorkflowExecutionInfo) (Device, bool) {
	fields := e.GetSearchAttributes().GetIndexedFields()
	attr := keyword(e)
	id, err := device.ParseID(attr("DeviceID"))
	if err != nil {
		return Device{}, false
	}
	d := Device{ID: id, State: devicemsg.State(attr("DeviceState")), Node: attr("DeviceNode"), Repair: attr("DeviceRepair"), Cause: attr("DeviceCause"), Forms: 1,
		Since: e.GetStartTime().AsTime()}
	if p, ok := fields["DeviceForms"]; ok {
		var list []string
		if converter.GetDefaultDataConverter().FromPayload(p, &list) == nil && len(list) > 0 {
			d.Forms = len(list)
		}
	}
	if d.State == "" {
		d.State = devicemsg.Healthy
	}
	return d, true
}

// State asks a device's workflow for its state record.
func (f *TemporalFleet) State(ctx context.Context, id device.ID) (devicemsg.DeviceView, error) {
	f.Calls.Add(1)
	return api.QueryDevice(ctx, f.Client, id.WorkflowID(), "")
}

// Breaker asks the breaker workflow for its state.
func (f *TemporalFleet) Breaker(ctx context.Context) (breaker.State, error) {
	var st breaker.State
	f.Calls.Add(1)
	v, err := f.Client.QueryWorkflow(ctx, api.BreakerWorkflowID, "", api.QueryState)
	if err != nil {
		return st, fmt.Errorf("query the breaker: %w", err)
	}
	return st, v.Get(&st)
}

// KubeCluster is the Cluster of a Kubernetes API: node-local ResourceSlices and the Nodes' pool
// labels (breaker.NodePool).
type KubeCluster struct {
	Kube       kubernetes.Interface
	PoolLabels []string
}

// Nodes lists every node that publishes devices, with its pool, sorted by name.
func (c *KubeCluster) Nodes(ctx context.Context) ([]Node, error) {
	slices, err := c.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list resource slices: %w", err)
	}
	nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	pool := map[string]string{}
	for _, n := range nodes.Items {
		pool[n.Name] = breaker.NodePool(n.Labels, c.PoolLabels)
	}
	byNode := map[string]*Node{}
	for _, s := range slices.Items {
		if s.Spec.NodeName == nil || *s.Spec.NodeName == "" {
			continue
		}
		n := byNode[*s.Spec.NodeName]
		if n == nil {
			n = &Node{Name: *s.Spec.NodeName, Pool: pool[*s.Spec.NodeName], Forms: map[device.ID][]device.ID{}, Labels: map[device.ID]string{}}
			byNode[n.Name] = n
		}
		offers := make([]device.Offer, 0, len(s.Spec.Devices))
		for _, d := range s.Spec.Devices {
			o := device.Offer{Name: d.Name}
			for _, c := range d.ConsumesCounters {
				o.CounterSets = append(o.CounterSets, c.CounterSet)
			}
			offers = append(offers, o)
		}
		// Forms that draw on one counter set are one physical unit: one cell.
		for _, u := range device.Units(s.Spec.Driver, s.Spec.Pool.Name, offers, device.Grouping{}) {
			if !u.Shared() {
				n.Devices = append(n.Devices, device.ID{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: u.Devices[0]})
				continue
			}
			n.Devices = append(n.Devices, u.Device())
			n.Forms[u.Device()], n.Labels[u.Device()] = u.DeviceIDs(), cmp.Or(u.Whole, u.Devices[0])
		}
	}
	out := make([]Node, 0, len(byNode))
	for _, n := range byNode {
		sort.Slice(n.Devices, func(i, j int) bool { return n.Devices[i].String() < n.Devices[j].String() })
		out = append(out, *n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Records reads the quarantine records of the device workflows that ran since: each running one's,
// and each closed one's last run (a query Temporal answers from its history), at most max of them.
func (f *TemporalFleet) Records(ctx context.Context, since time.Time, max int) (Records, error) {
	var r Records
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus != 'ContinuedAsNew' AND (ExecutionStatus = 'Running' OR CloseTime >= '%s')",
		api.DeviceWorkflow, since.UTC().Format(time.RFC3339))
	var token []byte
	for {
		f.Calls.Add(1)
		resp, err := f.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: f.Namespace, Query: query, NextPageToken: token})
		if err != nil {
			return r, fmt.Errorf("list device workflows since %s: %w", since.Format(time.RFC3339), err)
		}
		for _, e := range resp.GetExecutions() {
			if r.Read >= max {
				r.Capped = true
				return r, nil
			}
			f.Calls.Add(1)
			st, err := api.QueryDevice(ctx, f.Client, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId())
			if err != nil {
				continue // a history Temporal no longer keeps, or a run no worker can replay: left out
			}
			r.Read++
			if start := e.GetStartTime().AsTime(); r.Oldest.IsZero() || start.Before(r.Oldest) {
				r.Oldest = start
			}
			r.Quarantines = append(r.Quarantines, recordsOf(st)...)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return r, nil
		}
	}
}
