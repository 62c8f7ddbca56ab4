package decide

import "github.com/devicewarden/devicewarden/internal/devicemsg"

// The values the workflow takes and answers live in package devicemsg, so that callers use them
// without the decisions; these names keep decide's code and its callers' as they were.
type (
	State         = devicemsg.State
	Reporter      = devicemsg.Reporter
	Observation   = devicemsg.Observation
	Seq           = devicemsg.Seq
	Source        = devicemsg.Source
	CommandKind   = devicemsg.CommandKind
	Command       = devicemsg.Command
	CommandResult = devicemsg.CommandResult
	StepResult    = devicemsg.StepResult
	Transition    = devicemsg.Transition
	Stage         = devicemsg.Stage
)

// Review stages, in order: probe -> probation taint -> canary -> stability window -> sources ->
// approval -> release.
const (
	StageProbe     = devicemsg.StageProbe
	StageProbation = devicemsg.StageProbation
	StageCanary    = devicemsg.StageCanary
	StageStability = devicemsg.StageStability
	StageSources   = devicemsg.StageSources
	StageApproval  = devicemsg.StageApproval
	StageRelease   = devicemsg.StageRelease
)

// Device states.
const (
	Healthy     = devicemsg.Healthy
	Suspect     = devicemsg.Suspect
	Restricted  = devicemsg.Restricted
	Quarantined = devicemsg.Quarantined
	Recovering  = devicemsg.Recovering
	Released    = devicemsg.Released
	Retired     = devicemsg.Retired
)

// Observation sources.
const (
	SourcePodStatus      = devicemsg.SourcePodStatus
	SourceClaimCondition = devicemsg.SourceClaimCondition
	SourceSlice          = devicemsg.SourceSlice
	SourceNodeLease      = devicemsg.SourceNodeLease
)

// Alert levels.
const (
	LevelInfo     = devicemsg.LevelInfo
	LevelWarning  = devicemsg.LevelWarning
	LevelCritical = devicemsg.LevelCritical
)

// Operator commands.
const (
	CmdForceQuarantine = devicemsg.CmdForceQuarantine
	CmdRelease         = devicemsg.CmdRelease
	CmdExtend          = devicemsg.CmdExtend
	CmdPause           = devicemsg.CmdPause
	CmdResume          = devicemsg.CmdResume
	CmdApprove         = devicemsg.CmdApprove
	CmdReject          = devicemsg.CmdReject
	CmdReleaseApproval = devicemsg.CmdReleaseApproval
)

// Commands lists every operator command.
var Commands = devicemsg.Commands

// MaxReason bounds a command's reason, like the API bounds a health message.
const MaxReason = devicemsg.MaxReason
