package kubeobj

import (
	"strings"
	"testing"
)

// Two nodes whose names share their first 63 characters share the label, never the match.
func TestOnNodeIsExact(t *testing.T) {
	prefix := strings.Repeat("a", 63)
	x, y := prefix+"-x", prefix+"-y"
	labels, ann := map[string]string{}, map[string]string{}
	NodeLabels(labels, ann, x)
	if labels[LabelNode] != LabelValue(y) || NodeSelector(x) != NodeSelector(y) {
		t.Fatalf("the label is not the shared prefix: %q", labels[LabelNode])
	}
	if !OnNode(labels, ann, x) || OnNode(labels, ann, y) {
		t.Fatalf("x's object matches x %t, y %t", OnNode(labels, ann, x), OnNode(labels, ann, y))
	}
	// Written before the annotation: node's only when the label is the whole name.
	delete(ann, AnnotationNode)
	if OnNode(labels, ann, x) || OnNode(labels, ann, y) {
		t.Fatal("a cut label without the annotation matched a long name")
	}
	short := map[string]string{}
	NodeLabels(short, map[string]string{}, "node-1")
	if !OnNode(short, nil, "node-1") || OnNode(short, nil, "node-2") {
		t.Fatal("a short name's label is its own")
	}
	if OnNode(map[string]string{LabelNode: "node-1"}, map[string]string{AnnotationNode: "node-1"}, "node-1") {
		t.Fatal("an object not managed by DeviceWarden matched")
	}
}
