package kubeobj

// AnnotationNode names, in full, the node a node step's object or a node fence is for. LabelNode
// holds at most its first 63 characters: nodes whose names share them share the label, so a
// match always checks this annotation too (OnNode).
const AnnotationNode = "devicewarden.io/node"

// AnnotationRepairTryAt is when the try that wrote a node step's object began (RFC 3339): with
// AnnotationRepairTry it names the one try, across the quarantines of a device.
const AnnotationRepairTryAt = "devicewarden.io/repair-try-at"

// NodeLabels marks an object as DeviceWarden's for node: the label selects it (LabelNode, cut to
// 63 characters) and the annotation says which node exactly (AnnotationNode).
func NodeLabels(labels, annotations map[string]string, node string) {
	labels[LabelManagedBy], labels[LabelNode] = ManagedBy, LabelValue(node)
	annotations[AnnotationNode] = node
}

// NodeSelector selects DeviceWarden's objects labelled for node, and for every node whose name
// shares its first 63 characters: check each with OnNode.
func NodeSelector(node string) string {
	return LabelManagedBy + "=" + ManagedBy + "," + LabelNode + "=" + LabelValue(node)
}

// OnNode says whether an object labelled by NodeLabels is node's. One written before the
// annotation is node's only when its label holds the whole name.
func OnNode(labels, annotations map[string]string, node string) bool {
	if labels[LabelManagedBy] != ManagedBy || labels[LabelNode] != LabelValue(node) {
		return false
	}
	if full, ok := annotations[AnnotationNode]; ok {
		return full == node
	}
	return labels[LabelNode] == node
}
