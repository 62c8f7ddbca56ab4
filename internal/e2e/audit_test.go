//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ruleWrite is one DeviceTaintRule write the apiserver audited.
type ruleWrite struct {
	Verb string
	Name string
	Code int
	User string
}

// ruleWrites reads the local apiserver's audit log: every DeviceTaintRule write it answered.
func ruleWrites(t *testing.T, s *stack) []ruleWrite {
	t.Helper()
	f, err := os.Open(s.auditLog)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	var out []ruleWrite
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Stage     string                    `json:"stage"`
			Verb      string                    `json:"verb"`
			User      struct{ Username string } `json:"user"`
			ObjectRef struct {
				Resource string `json:"resource"`
				Name     string `json:"name"`
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line %q: %v", tail(sc.Text(), 200), err)
		}
		if ev.Stage != "ResponseComplete" || ev.ObjectRef.Resource != "devicetaintrules" {
			continue
		}
		out = append(out, ruleWrite{Verb: ev.Verb, Name: ev.ObjectRef.Name, Code: ev.ResponseStatus.Code, User: ev.User.Username})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// expectCreatedOnce checks from the audit log that each rule was created exactly once (one 201)
// and never deleted, and that no other rule was created.
func expectCreatedOnce(t *testing.T, s *stack, rules []string) {
	t.Helper()
	created, interrupted := map[string]int{}, map[string]int{}
	var deleted []string
	conflicts := 0
	for _, w := range ruleWrites(t, s) {
		switch {
		case w.Verb == "create" && w.Code == 201:
			created[w.Name]++
		case w.Verb == "create" && w.Code >= 500:
			// The client went away mid-request (a SIGKILLed process): the apiserver may have
			// committed the rule and audited 504 "context canceled". Counted below only for a
			// rule no create answered 201.
			interrupted[w.Name]++
		case w.Verb == "create" && w.Code == 409:
			conflicts++
		case strings.HasPrefix(w.Verb, "delete") && w.Code < 300:
			deleted = append(deleted, w.Name)
		}
	}
	for _, r := range rules {
		if created[r] == 0 && interrupted[r] > 0 {
			// Its one create was cut off by the kill and committed all the same: no 201 in the
			// log, and the rule exists. A second create of the same name could only follow a
			// delete, which the check below fails on.
			if _, err := s.kube.ResourceV1().DeviceTaintRules().Get(context.Background(), r, metav1.GetOptions{}); err == nil {
				t.Logf("rule %s: created by a create the kill cut off (%d such)", r, interrupted[r])
				created[r] = 1
			}
		}
		if created[r] != 1 {
			t.Errorf("rule %s created %d times, want exactly once; its audit events:\n%s", r, created[r], auditLinesOf(t, s, r))
		}
		delete(created, r)
	}
	t.Logf("audit log: %d creates found their rule already there (an action retried after the rule was written)", conflicts)
	if len(created) > 0 || len(deleted) > 0 {
		t.Errorf("other rules created %v, rules deleted %v", created, deleted)
	}
}

// auditLinesOf is every audit event that names the rule, any stage, for a failure's message.
func auditLinesOf(t *testing.T, s *stack, rule string) string {
	t.Helper()
	raw, err := os.ReadFile(s.auditLog)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, `"name":"`+rule+`"`) {
			out = append(out, tail(line, 600))
		}
	}
	return strings.Join(out, "\n")
}

// createdTimes counts the successful creates of one rule in the audit log.
func createdTimes(t *testing.T, s *stack, rule string) int {
	t.Helper()
	n := 0
	for _, w := range ruleWrites(t, s) {
		if w.Verb == "create" && w.Code == 201 && w.Name == rule {
			n++
		}
	}
	return n
}
