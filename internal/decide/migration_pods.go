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
	var pods []PodRef
	seen := map[PodRef]bool{}
	for _, r := range st.Reporters {
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
