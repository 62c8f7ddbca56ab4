package watcher

import (
	"fmt"
	"iter"
	"slices"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/devicewarden/devicewarden/internal/device"
)

// Claim is all the watcher keeps of a ResourceClaim: which devices it was allocated, and the
// DeviceClass of each request (which selects the device's policy).
type Claim struct {
	// UID names the claim in CDI device IDs of drivers that use "<claim-uid>-<device>".
	UID string
	// Reserved are the UIDs of the Pods the claim is reserved for: only their reports are believed.
	Reserved  []string
	Allocated bool
	// results are the allocation results, compact: most of the watcher's memory at fleet scale is
	// these (800,000 of them for 100,000 claims of 8 devices). Read them with Results.
	results []allocResult
	Classes []RequestClass
	// Troubled are devices whose driver set a Healthy or Ready condition that is not True.
	Troubled []DeviceCondition
}

// DeviceCondition is a driver's per-device condition in status.devices[], as health.
type DeviceCondition struct {
	Device  device.ID
	Health  device.Health
	Message string
}

// conditionHealth maps a driver's device conditions to health: Healthy=False is Unhealthy;
// Ready=False, or either condition Unknown, is Unknown. Other condition types say nothing here.
func conditionHealth(conds []metav1.Condition) (device.Health, string) {
	health, msg := device.Healthy, ""
	for _, c := range conds {
		if c.Type != "Healthy" && c.Type != "Ready" {
			continue
		}
		var h device.Health
		switch {
		case c.Status == metav1.ConditionTrue:
			continue
		case c.Type == "Healthy" && c.Status == metav1.ConditionFalse:
			h = device.Unhealthy
		default:
			h = device.Unknown
		}
		if h.Severity() > health.Severity() {
			health = h
			msg = fmt.Sprintf("claim device condition %s=%s: %s %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return health, msg
}

// AllocatedDevice is one allocation result.
type AllocatedDevice struct {
	// Request is "<request>" or "<request>/<subrequest>".
	Request, Driver, Pool, Device string
}

// allocResult is an AllocatedDevice as a claim keeps it: the request, driver and pool, which the
// devices of a claim mostly share, are one interned triple; 24 bytes instead of 64.
type allocResult struct {
	at     *requestPool
	device string
}

type requestPool struct{ request, driver, pool string }

// Results yields the claim's allocation results.
func (c *Claim) Results() iter.Seq[AllocatedDevice] {
	return func(yield func(AllocatedDevice) bool) {
		for _, r := range c.results {
			if !yield(AllocatedDevice{Request: r.at.request, Driver: r.at.driver, Pool: r.at.pool, Device: r.device}) {
				return
			}
		}
	}
}

// holds reports whether the claim was allocated the device.
func (c *Claim) holds(id device.ID) bool {
	for _, r := range c.results {
		if r.device == id.Device && r.at.pool == id.Pool && r.at.driver == id.Driver {
			return true
		}
	}
	return false
}

// RequestClass names the DeviceClass of a request ("<request>" or "<request>/<subrequest>").
type RequestClass struct {
	Request, Class string
}

// interner makes repeated names (drivers, pools, device names, request names) share one string,
// and repeated (request, driver, pool) triples one value. It keeps what it was given until the
// claim index sweeps it (sweep): names of nodes and claims that are gone are dropped then.
type interner struct {
	mu      sync.Mutex
	m       map[string]string
	triples map[requestPool]*requestPool
}

// size is how many names and triples the interner holds.
func (in *interner) size() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.m) + len(in.triples)
}

// triple returns the one shared value of (request, driver, pool); a nil interner makes a new one.
// The triple is the unit shared, so its strings need no interning of their own.
func (in *interner) triple(request, driver, pool string) *requestPool {
	k := requestPool{request, driver, pool}
	if in == nil {
		return &k
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.triples == nil {
		in.triples = map[requestPool]*requestPool{}
	}
	if v, ok := in.triples[k]; ok {
		return v
	}
	v := &k
	in.triples[k] = v
	return v
}

func (in *interner) get(s string) string {
	if in == nil {
		return s
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.m == nil {
		in.m = map[string]string{}
	}
	if v, ok := in.m[s]; ok {
		return v
	}
	in.m[s] = s
	return s
}

// compactClaim keeps the allocation results and request classes of a claim.
func compactClaim(c *resourcev1.ResourceClaim, in *interner) *Claim {
	out := &Claim{UID: string(c.UID)}
	for _, r := range c.Status.ReservedFor {
		if r.Resource == "pods" {
			out.Reserved = append(out.Reserved, string(r.UID))
		}
	}
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil {
			out.Classes = append(out.Classes, RequestClass{Request: in.get(r.Name), Class: in.get(r.Exactly.DeviceClassName)})
		}
		for _, s := range r.FirstAvailable {
			out.Classes = append(out.Classes, RequestClass{Request: in.get(r.Name + "/" + s.Name), Class: in.get(s.DeviceClassName)})
		}
	}
	for _, d := range c.Status.Devices {
		if h, msg := conditionHealth(d.Conditions); h != device.Healthy {
			out.Troubled = append(out.Troubled, DeviceCondition{
				Device: device.ID{Driver: in.get(d.Driver), Pool: in.get(d.Pool), Device: in.get(d.Device)}, Health: h, Message: msg})
		}
	}
	if a := c.Status.Allocation; a != nil {
		out.Allocated = true
		out.results = make([]allocResult, 0, len(a.Devices.Results))
		for _, r := range a.Devices.Results {
			out.results = append(out.results, allocResult{at: in.triple(r.Request, r.Driver, r.Pool), device: in.get(r.Device)})
		}
	}
	return out
}

// class returns the DeviceClass of a result's request.
func (c *Claim) class(request string) string {
	for _, rc := range c.Classes {
		if rc.Request == request {
			return rc.Class
		}
	}
	return ""
}

// claimIndex holds the compact form of every ResourceClaim, keyed by namespace/name, and the
// claims allocated devices of each pool: a detector's fault asks for a device's class and
// holders, and the answer must cost a look at its node's claims, not a scan of every claim in the
// fleet. By pool, not by device: a node's few claims cost a few bytes, a device's entry ten times
// more at 100,000 Pods of 8 devices.
type claimIndex struct {
	mu     sync.RWMutex
	claims map[string]*Claim
	byPool map[poolKey][]string
	// seen collects keys during a relist, to sweep claims that were deleted meanwhile.
	seen   map[string]struct{}
	intern interner
	// swept is the interner's size after its last sweep: it is swept again once it has doubled.
	swept int
}

// minSweep is the interner size below which it is never swept.
const minSweep = 4096

// maybeSweep drops, once the interner has doubled since its last sweep, every name and triple no
// claim in the index refers to: with node and claim churn it would otherwise grow for ever.
// Amortised, each put pays a constant share of the sweep. Callers hold x.mu.
func (x *claimIndex) maybeSweep() {
	if x.intern.size() <= 2*max(x.swept, minSweep) {
		return
	}
	live := interner{m: map[string]string{}, triples: map[requestPool]*requestPool{}}
	keep := func(s string) { live.m[s] = s }
	for _, c := range x.claims {
		for _, r := range c.results {
			live.triples[*r.at] = r.at
			keep(r.device)
		}
		for _, rc := range c.Classes {
			keep(rc.Request)
			keep(rc.Class)
		}
		for _, t := range c.Troubled {
			keep(t.Device.Driver)
			keep(t.Device.Pool)
			keep(t.Device.Device)
		}
	}
	x.intern.mu.Lock()
	x.intern.m, x.intern.triples = live.m, live.triples
	x.intern.mu.Unlock()
	x.swept = len(live.m) + len(live.triples)
}

func newClaimIndex() *claimIndex {
	return &claimIndex{claims: map[string]*Claim{}, byPool: map[poolKey][]string{}}
}

// file adds (or, with add false, takes out) the claim under key to the pools it was allocated
// devices of. Callers hold x.mu.
func (x *claimIndex) file(key string, c *Claim, add bool) {
	if c == nil {
		return
	}
	for r := range c.Results() {
		pk := poolKey{r.Driver, r.Pool}
		keys := x.byPool[pk]
		at := slices.Index(keys, key)
		switch {
		case add && at < 0:
			x.byPool[pk] = append(keys, key)
		case !add && at >= 0 && len(keys) == 1:
			delete(x.byPool, pk)
		case !add && at >= 0:
			x.byPool[pk] = slices.Delete(keys, at, at+1)
		}
	}
}

// holders are the keys of the claims allocated the device, sorted. Callers hold x.mu.
func (x *claimIndex) holders(id device.ID) []string {
	var out []string
	for _, key := range x.byPool[poolKey{id.Driver, id.Pool}] {
		if x.claims[key].holds(id) {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

func (x *claimIndex) get(namespace, name string) (*Claim, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	c, ok := x.claims[namespace+"/"+name]
	return c, ok
}

func (x *claimIndex) put(c *resourcev1.ResourceClaim) (string, *Claim) {
	key := c.Namespace + "/" + c.Name
	compact := compactClaim(c, &x.intern)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.file(key, x.claims[key], false)
	x.claims[key] = compact
	x.file(key, compact, true)
	if x.seen != nil {
		x.seen[key] = struct{}{}
	}
	x.maybeSweep()
	return key, compact
}

func (x *claimIndex) delete(c *resourcev1.ResourceClaim) string {
	key := c.Namespace + "/" + c.Name
	x.mu.Lock()
	defer x.mu.Unlock()
	x.file(key, x.claims[key], false)
	delete(x.claims, key)
	return key
}

func (x *claimIndex) relistBegin() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.seen = map[string]struct{}{}
}

// relistEnd drops claims the list did not return and reports their keys.
func (x *claimIndex) relistEnd() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var gone []string
	for k := range x.claims {
		if _, ok := x.seen[k]; !ok {
			x.file(k, x.claims[k], false)
			delete(x.claims, k)
			gone = append(gone, k)
		}
	}
	x.seen = nil
	return gone
}

// holdingAny returns the keys of the claims allocated any of the devices.
func (x *claimIndex) holdingAny(ids []device.ID) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []string
	for _, id := range ids {
		for _, key := range x.holders(id) {
			if !slices.Contains(out, key) {
				out = append(out, key)
			}
		}
	}
	slices.Sort(out)
	return out
}

// holding returns the key of a claim allocated the device, or "".
func (x *claimIndex) holding(id device.ID) string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if keys := x.holders(id); len(keys) > 0 {
		return keys[0]
	}
	return ""
}

// classOf returns the DeviceClass a claim allocated the device through ("" when no claim holds
// it): a detector's fault names no claim, and the device's policy is chosen by its class.
func (x *claimIndex) classOf(id device.ID) string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, key := range x.holders(id) {
		c := x.claims[key]
		for r := range c.Results() {
			if r.Device == id.Device && r.Pool == id.Pool && r.Driver == id.Driver {
				if class := c.class(r.Request); class != "" {
					return class
				}
			}
		}
	}
	return ""
}
