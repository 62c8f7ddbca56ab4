// Package metrics defines DeviceWarden's Prometheus metrics. Each component gets the
// collectors through a *Metrics so tests can use a fresh registry.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/devicewarden/devicewarden/internal/buildinfo"
)

// Metrics holds every collector.
type Metrics struct {
	Registry *prometheus.Registry

	// WatcherEvents counts informer events by kind (pod, claim) and action (add, update, delete).
	WatcherEvents *prometheus.CounterVec
	// WatcherReports counts device health reports extracted from pod status, by health.
	WatcherReports *prometheus.CounterVec
	// ResolutionFailures counts reports that could not be tied to a device, by reason.
	ResolutionFailures *prometheus.CounterVec
	// SignalSourceUp is 1 while a health-signal source (Prometheus) answers, 0 while it is stale.
	SignalSourceUp *prometheus.GaugeVec
	// SignalQueryErrors counts a source's failed queries, by signal; SignalFaults the faults it
	// read, by signal; SignalRefused the samples and series it could not use, by reason.
	SignalQueryErrors *prometheus.CounterVec
	SignalFaults      *prometheus.CounterVec
	SignalRefused     *prometheus.CounterVec
	// SignalPartial counts a source's answers that said they may miss series, by signal: no
	// level is withdrawn on them.
	SignalPartial *prometheus.CounterVec
	// SignalSeries is how many series a source remembers (its memory, one entry each).
	SignalSeries *prometheus.GaugeVec
	// Deduplicated counts device updates dropped because nothing changed since the last signal.
	Deduplicated prometheus.Counter
	// SkippedHealthy counts Healthy device updates not sent because the device has no workflow.
	SkippedHealthy prometheus.Counter
	// Signals counts signal-with-start calls to Temporal by result (ok, error).
	Signals *prometheus.CounterVec
	// SignalSeconds is the latency of one signal-with-start call.
	SignalSeconds prometheus.Histogram
	// QueueDepth is the number of devices waiting to be signalled.
	QueueDepth prometheus.Gauge
	// ReportAge is how long ago the device with a workflow that waited longest was last signalled:
	// the heartbeat keeps it near the heartbeat interval; past the heartbeat limit its workflow
	// counts a Healthy report as stale.
	ReportAge prometheus.Gauge
	// Leading is 1 while this replica's watcher runs (it holds the Lease, or runs without
	// leader election); summed over replicas it says whether anyone watches.
	Leading prometheus.Gauge
	// Quarantines counts quarantine activity calls by result (created, existing, error).
	Quarantines *prometheus.CounterVec
	// Permits counts circuit-breaker answers by result (granted, denied).
	Permits *prometheus.CounterVec
	// BreakerTrips counts how often the circuit breaker opened.
	BreakerTrips prometheus.Counter
	// NodeOutages counts node-level outage decisions (a node Lease that expired).
	NodeOutages prometheus.Counter
	// Alerts counts alerts by level.
	Alerts *prometheus.CounterVec
	// Releases counts devices returned to service by result (released).
	Releases *prometheus.CounterVec
	// QuarantineSeconds is how long released devices spent fenced.
	QuarantineSeconds prometheus.Histogram
	// FalseQuarantines counts releases whose first probe and canary passed.
	FalseQuarantines prometheus.Counter
	// AmbiguousReports counts health reports that could be any of several devices, by the
	// policy's action (alert, quarantine-candidates).
	AmbiguousReports *prometheus.CounterVec
	// Checks counts probe and canary runs by kind and result (passed, failed).
	Checks *prometheus.CounterVec
	// RepairTries counts repair steps run, by step and result (passed, failed, busy); RepairSeconds
	// is the time from quarantine to release of devices a repair brought back, by step; Retired
	// counts devices retired.
	RepairTries   *prometheus.CounterVec
	RepairSeconds *prometheus.HistogramVec
	Retired       prometheus.Counter
	// Relapses counts quarantines of a device released within the last 30 days;
	// TimeBetweenIncidents is the time from a device's last quarantine to its next.
	Relapses             prometheus.Counter
	TimeBetweenIncidents prometheus.Histogram
	// Notifications counts Slack messages by result (sent, failed).
	Notifications *prometheus.CounterVec
	// Migrations counts finished migrations by outcome and failure class (empty unless failed).
	Migrations *prometheus.CounterVec
	// MigrationSeconds is a migration's duration, from its slot to its end; CheckpointSeconds how
	// long workloads took to answer a checkpoint request.
	MigrationSeconds, CheckpointSeconds prometheus.Histogram
	// IdleDeviceSeconds adds, per migration, the seconds from the quarantine until the workload was
	// off the device: time the job computed on a device already taken out of service.
	IdleDeviceSeconds prometheus.Counter
	// CapacityViolations is how many shared-capacity invariant violations the last check found, by
	// invariant (oversold, policy-breach, duplicate-share-id, distinct-attribute, forbidden-namespace).
	CapacityViolations *prometheus.GaugeVec
	// RolloutGates counts rollout phase gate evaluations by result (passed, failed); RolloutRollbacks
	// counts phases rolled back (by a failed gate or a rollback command).
	RolloutGates     *prometheus.CounterVec
	RolloutRollbacks prometheus.Counter
	// ClaimFindings is how many claims the last hygiene scan found, by kind (leaked, stuck,
	// node-lost); ClaimsDeleted counts leaked claims claim hygiene deleted.
	ClaimFindings *prometheus.GaugeVec
	ClaimsDeleted prometheus.Counter
}

// New registers all collectors in a new registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		WatcherEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "watcher", Name: "events_total",
			Help: "Informer events seen by the watcher.",
		}, []string{"kind", "action"}),
		WatcherReports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "watcher", Name: "reports_total",
			Help: "Device health reports read from pod status.",
		}, []string{"health"}),
		ResolutionFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "watcher", Name: "resolution_failures_total",
			Help: "Health reports that could not be resolved to a device.",
		}, []string{"reason"}),
		SignalSourceUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "devicewarden", Subsystem: "signals", Name: "source_up",
			Help: "1 while a health-signal source answers its queries, 0 while it is stale (no device is Unknown for it).",
		}, []string{"source"}),
		SignalQueryErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "signals", Name: "query_errors_total",
			Help: "Failed queries of a health-signal source, by signal.",
		}, []string{"source", "signal"}),
		SignalFaults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "signals", Name: "faults_total",
			Help: "Faults read from a health-signal source and mapped onto a device, by signal.",
		}, []string{"source", "signal"}),
		SignalRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "signals", Name: "refused_total",
			Help: "Samples and faults a health-signal source could not use (NaN values, labels that name no device), by reason.",
		}, []string{"source", "reason"}),
		SignalPartial: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "signals", Name: "partial_answers_total",
			Help: "Answers of a health-signal source that said they may miss series (warnings, isPartial), by signal: no level is withdrawn on them.",
		}, []string{"source", "signal"}),
		SignalSeries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "devicewarden", Subsystem: "signals", Name: "series",
			Help: "Series a health-signal source remembers, to tell a new fault from one already read.",
		}, []string{"source"}),
		Deduplicated: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "watcher", Name: "deduplicated_total",
			Help: "Device updates not signalled because nothing changed.",
		}),
		SkippedHealthy: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "watcher", Name: "skipped_healthy_total",
			Help: "Healthy device updates not signalled because the device has no workflow.",
		}),
		Signals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "watcher", Name: "signals_total",
			Help: "Signal-with-start calls to device workflows.",
		}, []string{"result"}),
		SignalSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "devicewarden", Subsystem: "watcher", Name: "signal_seconds",
			Help:    "Latency of one signal-with-start call.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		QueueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "devicewarden", Subsystem: "watcher", Name: "queue_depth",
			Help: "Devices waiting to be signalled.",
		}),
		ReportAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "devicewarden", Subsystem: "watcher", Name: "oldest_report_age_seconds",
			Help: "Seconds since the longest-waiting device with a workflow and a reporting pod was last signalled (0: none). Above the heartbeat limit (10m) its workflow counts Healthy as stale.",
		}),
		Quarantines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "activities", Name: "quarantines_total",
			Help: "Quarantine activity calls.",
		}, []string{"result"}),
		Permits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "breaker", Name: "permits_total",
			Help: "Circuit-breaker answers to automatic actions.",
		}, []string{"result"}),
		BreakerTrips: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "breaker", Name: "trips_total",
			Help: "Times the circuit breaker opened.",
		}),
		NodeOutages: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "watcher", Name: "node_outages_total",
			Help: "Node-level outage decisions: node Leases that expired.",
		}),
		Alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "activities", Name: "alerts_total",
			Help: "Alerts raised, by level.",
		}, []string{"level"}),
		Releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "release", Name: "releases_total",
			Help: "Devices returned to service after a recovery review.",
		}, []string{"result"}),
		QuarantineSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "devicewarden", Subsystem: "release", Name: "quarantine_seconds",
			Help:    "Time released devices spent quarantined or restricted.",
			Buckets: prometheus.ExponentialBuckets(60, 4, 10),
		}),
		FalseQuarantines: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "release", Name: "false_quarantines_total",
			Help: "Releases whose first probe and canary passed: the device was probably never broken.",
		}),
		AmbiguousReports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "watcher", Name: "ambiguous_reports_total",
			Help: "Health reports that could be any of several devices of a claim, by the policy's action.",
		}, []string{"action"}),
		Checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "release", Name: "checks_total",
			Help: "Probe and canary Pods run on quarantined devices, by kind and result (passed, failed: the device's verdict; not-run: the tooling's failure, an image not pulled, a Pod never scheduled or evicted, a tool's not-run exit code).",
		}, []string{"kind", "result"}),
		Notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "slack", Name: "notifications_total",
			Help: "Slack notifications and approval requests.",
		}, []string{"result"}),
		Migrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "migration", Name: "migrations_total",
			Help: "Finished migrations by outcome (migrated, evidence-preserved, abandoned, failed) and failure class.",
		}, []string{"outcome", "class"}),
		MigrationSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "devicewarden", Subsystem: "migration", Name: "duration_seconds",
			Help:    "Duration of a migration from its rate-limit slot to its end.",
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 14),
		}),
		CheckpointSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "devicewarden", Subsystem: "migration", Name: "checkpoint_wait_seconds",
			Help:    "How long workloads took to answer a checkpoint request.",
			Buckets: prometheus.ExponentialBuckets(0.5, 2, 12),
		}),
		IdleDeviceSeconds: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "devicewarden", Subsystem: "migration", Name: "quarantined_device_busy_seconds_total",
			Help: "Seconds from a quarantine until the workload was off the device, summed over migrations.",
		}),
	}
	m.CapacityViolations = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "devicewarden", Subsystem: "capacity", Name: "violations",
		Help: "Shared-capacity invariant violations found by the last check, by invariant.",
	}, []string{"invariant"})
	m.RolloutGates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "devicewarden", Subsystem: "rollout", Name: "gate_evaluations_total",
		Help: "Rollout phase gate evaluations by result (passed, failed).",
	}, []string{"result"})
	m.RolloutRollbacks = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "devicewarden", Subsystem: "rollout", Name: "rollbacks_total",
		Help: "Rollout phases rolled back (new claims for their classes refused).",
	})
	m.ClaimFindings = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "devicewarden", Subsystem: "claim_hygiene", Name: "findings",
		Help: "Claims the last hygiene scan found, by kind (leaked, stuck, node-lost).",
	}, []string{"kind"})
	m.ClaimsDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "devicewarden", Subsystem: "claim_hygiene", Name: "deletions_total",
		Help: "Leaked ResourceClaims deleted by claim hygiene.",
	})
	m.RepairTries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "devicewarden", Subsystem: "repair", Name: "tries_total",
		Help: "Repair steps run on quarantined devices, by step and result (passed, failed, busy: another claim held the device, not-run: the tooling's failure, no verdict on the device).",
	}, []string{"step", "result"})
	m.RepairSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "devicewarden", Subsystem: "repair", Name: "time_to_repair_seconds",
		Help:    "From quarantine to release (rule deleted) of devices a repair step brought back, by the step that did, the fault's cause class (xid 48, row-remap-failure, unknown) and the first step the cause chose (reset, node, ladder).",
		Buckets: prometheus.ExponentialBuckets(10, 3, 10),
	}, []string{"step", "cause", "first"})
	m.Retired = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "devicewarden", Subsystem: "repair", Name: "retired_total",
		Help: "Devices retired: the repair ladder gave up, or they relapsed too often. Replace them.",
	})
	m.Relapses = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "devicewarden", Subsystem: "repair", Name: "relapses_total",
		Help: "Quarantines of a device whose last quarantine ended (released) within 30 days.",
	})
	m.TimeBetweenIncidents = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "devicewarden", Subsystem: "device", Name: "time_between_incidents_seconds",
		Help:    "From a device's last quarantine to its next: the mean is the fleet's mean time between incidents per device.",
		Buckets: prometheus.ExponentialBuckets(60, 4, 10),
	})
	m.Registry.MustRegister(m.RepairTries, m.RepairSeconds, m.Retired, m.Relapses, m.TimeBetweenIncidents)
	m.Leading = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "devicewarden", Subsystem: "watcher", Name: "leading",
		Help: "1 while this replica's watcher runs (it holds the Lease); summed over replicas, whether anyone watches.",
	})
	m.Registry.MustRegister(m.CapacityViolations, m.RolloutGates, m.RolloutRollbacks, m.ClaimFindings, m.ClaimsDeleted, m.Leading)
	bi := buildinfo.Read()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "devicewarden", Name: "build_info",
		Help: "Always 1; the labels say which build runs (version, flavour: full or lean, VCS revision, Go version).",
	}, []string{"version", "flavour", "revision", "goversion"})
	build.WithLabelValues(bi.Version, bi.Flavour, bi.Revision, bi.GoVersion).Set(1)
	m.Registry.MustRegister(build)
	// The Go runtime (go_*) and the process (process_*: CPU seconds, resident memory, open files).
	m.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Registry.MustRegister(m.AmbiguousReports, m.Releases, m.QuarantineSeconds, m.FalseQuarantines, m.Checks, m.Notifications, m.NodeOutages, m.Permits, m.BreakerTrips, m.Alerts, m.WatcherEvents, m.WatcherReports, m.ResolutionFailures, m.SignalSourceUp, m.SignalQueryErrors, m.SignalFaults, m.SignalRefused, m.SignalPartial, m.SignalSeries, m.Deduplicated, m.SkippedHealthy,
		m.Signals, m.SignalSeconds, m.QueueDepth, m.ReportAge, m.Quarantines, m.Migrations, m.MigrationSeconds, m.CheckpointSeconds, m.IdleDeviceSeconds)
	return m
}
