package decide

import "github.com/devicewarden/devicewarden/internal/device"

// migrationPods says which Pods to move after an action was applied: those that reported the
// device, when the action quarantined it because it is Unhealthy and the policy moves jobs. Unknown
// never moves a job (Suspect and Restricted devices keep theirs), nor does a forced quarantine of a
// device no Pod reported Unhealthy.
func (g fencing) migrationPods(act Action) []PodRef {
	st := g.st
	if act.To != Quarantined || st.Health != device.Unhealthy || !st.Policy.Migration.Enabled {
		return nil
	}
	return podsOf(st.Reporters)
}

// faultHolders are the Pods that hold a device quarantined automatically (for a fault, which a
// detector may have named without them), when the policy moves jobs; a person's quarantine of a
// device its Pods call Healthy moves none.
func (g fencing) faultHolders() []PodRef {
	st := g.st
	q := st.Quarantine
	if q == nil || !st.Policy.Migration.Enabled || (q.Actor != Actor && st.Health != device.Unhealthy) {
		return nil
	}
	return podsOf(st.Reporters)
}

// podsOf are the Pods among the reporters, each once.
func podsOf(rs []Reporter) []PodRef {
	var pods []PodRef
	seen := map[PodRef]bool{}
	for _, r := range rs {
		ref := PodRef{Namespace: r.Namespace, Name: r.Pod}
		if r.Pod == "" || seen[ref] {
			continue
		}
		seen[ref] = true
		pods = append(pods, ref)
	}
	return pods
}

// PodRef names a Pod.
type PodRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}
