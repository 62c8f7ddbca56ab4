package workflows

import (
	"testing"

	"github.com/devicewarden/devicewarden/api"
)

// Every workflow type the contract names is implemented here, and nothing else is registered.
func TestAllImplementsTheContract(t *testing.T) {
	if len(All) != len(api.WorkflowTypes) {
		t.Errorf("%d workflow types registered, the contract names %d", len(All), len(api.WorkflowTypes))
	}
	for _, name := range api.WorkflowTypes {
		if All[name] == nil {
			t.Errorf("the contract names %s, and no workflow implements it", name)
		}
	}
}
