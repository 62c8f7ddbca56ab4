package remediation

import (
	"context"

	"github.com/devicewarden/devicewarden/internal/policy"
)

// PolicyInput names the device a workflow started without a policy needs one for.
type PolicyInput struct {
	Driver      string `json:"driver"`
	DeviceClass string `json:"deviceClass,omitempty"`
}

// DevicePolicy is the policy this worker runs under for the device: the one the running
// DeviceWarden was given (the chart's), whoever started the workflow. A command-line tool that
// fences a device with no workflow starts it without a policy, and the workflow asks here.
func (a *Activities) DevicePolicy(_ context.Context, in PolicyInput) (policy.Policy, error) {
	set := a.Policies
	if set == nil {
		set = policy.DefaultSet()
	}
	return set.For(in.DeviceClass, in.Driver), nil
}
