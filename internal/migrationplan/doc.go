// Package migrationplan holds a migration's pure rules: its phases and steps, how a workload
// moves (suspend or evict), a person's decision on a migration that waits, and the slots that
// bound how many migrations run per node and in the cluster.
package migrationplan
