// Package workflows implements the contract of package api: DeviceWarden's deterministic
// orchestration. Nothing here does I/O: every side effect is an activity in package activities,
// and every decision is made by the pure state machines in internal/decide, internal/breaker,
// internal/migrationplan, internal/escalation and internal/rolloutplan.
package workflows
