# DeviceWarden. A new user needs two targets: `make dev` and `make test`.
SHELL := /bin/bash
GO ?= go
BIN := bin/devicewarden
# The lean flavour for clusters (build tag lean): no embedded Temporal server or UI, no local cluster,
# simulator or benchmarks. The image carries it.
BIN_LEAN := bin/devicewarden-lean
# go build -v prints each package it compiles; show errors and a count every 250 packages.
BUILD_PROGRESS = awk '/^\#|: /{print; next} {n++} n%250==0 && n>0 {print "    ... " n " packages compiled"; fflush()}'
LDFLAGS_VERSION = -X github.com/devicewarden/devicewarden/internal/buildinfo.Version=$(VERSION)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Everything is compiled as `make build` links (CGO_ENABLED=0: static), so staticlint, both
# binaries and the e2e tests share one build cache; only the race detector needs cgo.
export CGO_ENABLED := 0
# The builds (the control plane's for `make dev` too), the checkers and the tests run at GOGC=400,
# unless the user set a GOGC; the binary `make dev` starts and what `make bench` measures do not.
# Any GOGC turns off the compiler's own larger first heap; against it, 400 compiled 2-4% faster
# for a third more memory, and the lint over every package took 688 s cold instead of 734 s
# (BENCHMARKS.md).
BUILD_GOGC := $(or $(GOGC),400)
# Unit tests run with the race detector over the lean build's graph (build tag lean), so the Temporal
# server is never compiled for the race detector; the packages that differ in the full build run again
# without it. The e2e package is behind the e2e build tag and runs separately against the real stack.
# Test binaries link without DWARF (-w): a failure's stack, a panic and the race detector's
# reports read the symbol table, which stays; a race-built test binary links in a fifth less
# time (BENCHMARKS.md). -vet=off: go test's own vet pass is a subset of `make lint`, which
# the check runs over the same packages and tags before the tests.
TEST_FLAGS = -count=1 -vet=off -ldflags=-w
FULL_PKGS = ./internal/temporalserver/ ./internal/app/ ./internal/cli/ ./internal/buildinfo/
RACE_PKGS = $$($(GO) list ./... | grep -v /internal/temporalserver)
# Checkers built from the Go module proxy into the cache, like the control plane.
TOOLS_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/devicewarden/tools
# staticlint is staticcheck v0.8.2 with go vet's analyzers added (internal/staticlint, a module of its
# own): one load of every package and its dependencies instead of two. Its directory is named by its
# source, so a change builds it again.
STATICLINT_ID := $(shell cat internal/staticlint/go.mod internal/staticlint/main.go 2>/dev/null | sha256sum | cut -c1-12)
STATICLINT = $(TOOLS_DIR)/staticlint-$(STATICLINT_ID)/staticlint
WORKFLOWCHECK = $(TOOLS_DIR)/workflowcheck-v0.6.0/workflowcheck
# helm is built like the control plane (`cluster build --tools helm`), at the project's module
# versions where it shares modules with it, so its client-go and API packages come from the cache.
HELM = $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/devicewarden/bin/helm
CHART = deploy/helm/devicewarden
build build-lean control-plane modules lint workflowcheck $(STATICLINT) $(WORKFLOWCHECK) helm tools test-unit test-e2e image-check simulate: export GOGC = $(BUILD_GOGC)

.PHONY: simulate dev test test-unit test-e2e tools helm postgres packages check check-static cold-check modules fmt lint workflowcheck chart image image-check bench mutation build build-lean control-plane chromium clean

build: ## Build the devicewarden binary (static: CGO_ENABLED=0, so the image can run it on scratch)
	@echo "==> building $(BIN) (the first build compiles the Temporal server: several minutes)"
	@mkdir -p bin
	@set -o pipefail; CGO_ENABLED=0 $(GO) build -v -ldflags "$(LDFLAGS_VERSION)" -o $(BIN) ./cmd/devicewarden 2>&1 | \
		$(BUILD_PROGRESS)
	@echo "==> $(BIN) ready"

build-lean: ## Build the lean binary for clusters (tag lean, static, stripped): what the image carries
	@echo "==> building $(BIN_LEAN) (lean: no embedded Temporal server, local cluster, simulator or benchmarks)"
	@mkdir -p bin
	@set -o pipefail; CGO_ENABLED=0 $(GO) build -v -tags lean -ldflags "-s -w $(LDFLAGS_VERSION)" -o $(BIN_LEAN) ./cmd/devicewarden 2>&1 | \
		$(BUILD_PROGRESS)
	@echo "==> $(BIN_LEAN) ready ($$(du -m $(BIN_LEAN) | cut -f1) MB)"

control-plane: build ## Build etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok into the cache
	@$(BIN) cluster build

dev: control-plane ## Local cluster + embedded Temporal + UI + worker + watcher, with 3 simulated GPU nodes
	$(BIN) dev --sim-nodes 3 --sim-devices 8

test: test-unit test-e2e ## All tests

# The tests that need a real Temporal server run it as a child process of the full binary
# (internal/temporalserver/temporaltest), so no test binary links the server.
# go test runs at most -p builds, links and test runs at once (the number of cores by default). With
# one more, a package whose tests wait on a server or a timer leaves room for the next package's
# link (BENCHMARKS.md: the race run warm in 180 s instead of 205 s). The runs without the race
# detector (the month-long workflow runs, the full build's own tests) go beside it, into the
# moments its builds and tests leave a core idle (a cold race run kept both cores 87% busy).
UNIT_P ?= 3
test-unit: build ## Unit, workflow (time-skipping) and replay tests with the race detector, and beside them the full build's own
	@echo "==> unit tests with the race detector, over the lean build's graph (a cold build takes minutes);"
	@echo "    beside them the month-long workflow runs and the full build's own tests, whose output follows"
	@side=$$(mktemp -d); \
	( $(GO) test $(TEST_FLAGS) -run 'AMonth' ./workflows/ >$$side/month.log 2>&1; echo $$? >$$side/month.rc; \
	  $(GO) test $(TEST_FLAGS) $(FULL_PKGS) >$$side/full.log 2>&1; echo $$? >$$side/full.rc ) & \
	echo "CGO_ENABLED=1 go test -p $(UNIT_P) -race -tags lean $(TEST_FLAGS) <every package but internal/temporalserver>"; \
	CGO_ENABLED=1 DEVICEWARDEN_BIN=$(CURDIR)/$(BIN) $(GO) test -p $(UNIT_P) -race -tags lean $(TEST_FLAGS) $(RACE_PKGS); rc=$$?; \
	wait; \
	echo "==> the month-long workflow runs (30 simulated days each), without the race detector: go test $(TEST_FLAGS) -run 'AMonth' ./workflows/"; cat $$side/month.log; \
	echo "==> the full build's own tests, the embedded Temporal server and the one-machine commands: go test $(TEST_FLAGS) $(FULL_PKGS)"; cat $$side/full.log; \
	month=$$(cat $$side/month.rc); full=$$(cat $$side/full.rc); rm -rf $$side; \
	[ $$rc = 0 ] && [ $$month = 0 ] && [ $$full = 0 ]

# One cluster build for the control plane, Prometheus and the stock Temporal server (the version
# the binary embeds, so it compiles only its two commands), so they compile beside the rest.
E2E_TOOLS = prometheus,temporal-server
tools: build helm chromium postgres ## What the e2e tests run besides the binary: the control plane, kwok, the temporal CLI, Prometheus, the stock Temporal server, helm, Chromium, PostgreSQL
	@$(BIN) cluster build --tools $(E2E_TOOLS)

# How many e2e tests run at once: the harness runs the shared stack's cluster-wide tests one at a
# time, the tests on stacks of their own beside them (they mostly wait on timers), then the
# shared-stack tests that look only at their own nodes (internal/e2e/schedule_test.go).
E2E_PARALLEL ?= 4
# The activities' tests run on a cluster of their own beside the stack's tests (which wait on timers
# for much of their time); their output follows.
test-e2e: tools ## Integration tests on a real local cluster and the embedded Temporal server
	@echo "==> integration tests on the real local stack (screenshots of the fleet page in .artefacts/);"
	@echo "    beside them the activities' tests on a real local cluster of their own"
	@side=$$(mktemp -d); \
	( $(GO) test -tags e2e $(TEST_FLAGS) -timeout 5m -v ./activities/e2e/ >$$side/activities.log 2>&1; echo $$? >$$side/activities.rc ) & \
	echo "go test -tags e2e $(TEST_FLAGS) -timeout 30m -parallel $(E2E_PARALLEL) -v ./internal/e2e/"; \
	DEVICEWARDEN_HELM=$(HELM) DEVICEWARDEN_ARTEFACTS=$(CURDIR)/.artefacts $(GO) test -tags e2e $(TEST_FLAGS) -timeout 30m -parallel $(E2E_PARALLEL) -v ./internal/e2e/; rc=$$?; \
	wait; \
	echo "==> the activities on a real local cluster: go test -tags e2e $(TEST_FLAGS) -timeout 5m -v ./activities/e2e/"; cat $$side/activities.log; \
	activities=$$(cat $$side/activities.rc); rm -rf $$side; \
	[ $$rc = 0 ] && [ $$activities = 0 ]

postgres: ## Debian's PostgreSQL, for the e2e tests on the stock Temporal server (installed when root; the tests say why they skip otherwise)
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then echo "==> installing postgresql (Debian package)"; apt-get install -y -q postgresql >/dev/null; \
		else echo "postgresql is not installed and this is not root: the PostgreSQL tests will be skipped"; fi; }

chromium: ## Debian's Chromium, for the fleet page's browser test (installed when root; the test says why it skips otherwise)
	@command -v chromium >/dev/null || { \
		if [ "$$(id -u)" = 0 ]; then echo "==> installing chromium (Debian package)"; apt-get install -y -q chromium >/dev/null; \
		else echo "chromium is not installed and this is not root: the browser test will be skipped"; fi; }

# The check's phases, in the order it runs them; cold-check times each.
CHECK_PHASES = modules check-static image-check test-unit tools test-e2e
check: $(CHECK_PHASES) ## What CI runs: gofmt, staticcheck with go vet's analyzers, the workflow determinism check, helm lint, the image and every test

check-static: fmt lint workflowcheck chart ## The static checks: gofmt, staticcheck with go vet's analyzers, workflowcheck, helm lint

# The download waits on the proxy more than on the CPU (a third of two cores, cold), and so does
# apt-get, so the missing Debian packages are installed beside it and the static checkers, which
# resolve their own modules, build beside both.
modules: ## Download the module graph (the project's; the tools resolve their own as they build) and the missing Debian packages, and build the static checkers beside them
	@echo "==> downloading modules and any missing Debian packages; beside them, building the static checkers"
	@echo "$(GO) mod download"
	@$(GO) mod download & download=$$!; \
	$(MAKE) --no-print-directory packages & packages=$$!; \
	$(MAKE) --no-print-directory $(STATICLINT) $(WORKFLOWCHECK); built=$$?; \
	wait $$download; downloaded=$$?; wait $$packages; installed=$$?; \
	[ $$downloaded = 0 ] && [ $$installed = 0 ] && [ $$built = 0 ]

# The Debian packages the check uses: buildah (the image), Chromium (the fleet page's browser test),
# PostgreSQL (the e2e tests on the stock Temporal server). One apt-get installs the missing ones;
# `make image`, `make chromium` and `make postgres` each install their own when run alone.
packages: ## Install the Debian packages the check uses that are missing (buildah, Chromium, PostgreSQL), when root
	@missing=; \
	command -v buildah >/dev/null || missing="$$missing buildah"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "not root, so not installing$$missing: the targets that need them say so"; exit 0; fi; \
	echo "==> installing$$missing (Debian packages)"; apt-get install -y -q $$missing >/dev/null

cold-check: ## make check in a fresh clone with empty Go, module and tool caches (a temporary home), timed by phase
	@.ci/cold-check $(CHECK_PHASES)

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# go vet and staticcheck each parsed and type-checked every dependency (about 2,100 packages) for
# their facts, each into a cache of its own: vet's analyses alone took 168 s of a cold check
# (BENCHMARKS.md). staticlint runs vet's analyzers beside staticcheck's in one load. The e2e and image
# tags only add files, so one pass with both covers every package; the lean tag leaves files out, so
# the packages that differ in the lean build are checked again with it (what only the lean build
# compiles is a choice between code both builds compile: internal/layers keeps it so).
CHECK_TAGS = e2e,image
$(STATICLINT):
	@echo "==> building staticlint (staticcheck v0.8.2 and go vet's analyzers) from the Go module proxy into $(dir $@)"
	cd internal/staticlint && $(GO) build -ldflags="-s -w" -o $@ .

lint: $(STATICLINT) ## staticcheck and go vet's analyzers over every package, the e2e tests and the lean build included
	$(STATICLINT) -tags $(CHECK_TAGS) ./...
	$(STATICLINT) -tags lean ./cmd/... ./internal/cli/ ./internal/app/ ./internal/buildinfo/

$(WORKFLOWCHECK):
	@echo "==> building workflowcheck v0.6.0 from the Go module proxy into $(dir $@)"
	GOBIN=$(dir $@) $(GO) install -ldflags="-s -w" go.temporal.io/sdk/contrib/tools/workflowcheck@v0.6.0

workflowcheck: $(WORKFLOWCHECK) ## Temporal's determinism checker over the workflows
	$(WORKFLOWCHECK) ./workflows/...

helm: build ## helm, built from the Go module proxy into the control plane's cache (a minute the first time)
	@$(BIN) cluster build --tools helm --tools-only

IMAGE = bin/devicewarden-image.tar
BUILDAH = buildah --storage-driver vfs

image: build-lean ## The OCI image (the lean static binary on scratch, non-root) as an archive, built by buildah with no daemon
	@command -v buildah >/dev/null || { \
		if [ "$$(id -u)" = 0 ]; then echo "==> installing buildah (Debian package)"; apt-get install -y -q buildah >/dev/null; \
		else echo "make image needs buildah: apt-get install buildah (as root)"; exit 1; fi; }
	@echo "==> building the image devicewarden:$(VERSION) into $(IMAGE)"
	@rm -rf bin/image-context $(IMAGE) && mkdir -p bin/image-context
	cp $(BIN_LEAN) bin/image-context/devicewarden
	cp /etc/ssl/certs/ca-certificates.crt bin/image-context/
	$(BUILDAH) bud -q --layers=false -f deploy/image/Containerfile -t devicewarden:$(VERSION) bin/image-context
	$(BUILDAH) push -q devicewarden:$(VERSION) oci-archive:$(IMAGE):devicewarden:$(VERSION)
	$(BUILDAH) rmi -f devicewarden:$(VERSION) >/dev/null
	@rm -rf bin/image-context

image-check: image ## Build the image and inspect the archive: user, entrypoint, the binary's version
	DEVICEWARDEN_IMAGE=$(CURDIR)/$(IMAGE) DEVICEWARDEN_VERSION=$(VERSION) $(GO) test -tags image $(TEST_FLAGS) ./internal/imagecheck/

chart: helm ## helm lint and helm template of the chart (the e2e tests apply it to the real apiserver)
	$(HELM) lint --strict $(CHART) --set temporal.address=temporal-frontend.temporal:7233
	$(HELM) template devicewarden $(CHART) --kube-version 1.37.2 --set temporal.address=temporal-frontend.temporal:7233 > /dev/null

bench: build build-lean control-plane ## Benchmarks against the real local stack; figures go in BENCHMARKS.md
	$(BIN) bench flavours --runs 5 --log-level warn
	$(GO) test -run '^$$' -bench . -benchmem ./internal/watcher/
	$(BIN) bench quarantine --devices 200 --log-level warn
	$(BIN) bench units --nodes 8 --log-level error
	$(BIN) bench release --devices 120 --sequential 20 --log-level error
	$(BIN) bench causes --faults 100 --log-level error
	$(BIN) bench migrate --workloads 20 --log-level error
	$(GO) test -run '^$$' -bench . -benchmem ./internal/rolloutplan/
	$(BIN) bench rollout --nodes 1000 --devices 8 --claims 10000 --log-level warn
	$(GO) test -run '^$$' -bench . -benchmem ./internal/capacity/
	$(BIN) bench capacity --nodes 1000 --devices 8 --claims 10000 --log-level warn
	$(BIN) bench watcher --pods 10000 --updates 20000 --log-level warn
	$(BIN) bench watcher --pods 50000 --updates 20000 --log-level warn
	$(BIN) bench storm --devices 5000 --log-level error
	$(BIN) bench storm --devices 8000 --share 0.01 --rest 60s --health Unhealthy --log-level error
	$(BIN) bench storm --devices 8000 --share 0.1 --rest 60s --health Unhealthy --log-level error
	$(BIN) bench reports --devices 50 --fleet 1000 --by-name --log-level error
	$(BIN) bench dcgm --devices 20 --fleet 1000 --log-level error

GREMLINS = $(GO) run github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0
MUTATION_PKGS = internal/policy internal/cause internal/decide internal/breaker internal/migrationplan internal/escalation internal/rolloutplan internal/capacity workflows activities/remediation activities/migration activities/rollouts activities/hygiene internal/kubeobj internal/watcher

N ?= 100000
SIM_WORKFLOWS = DeviceWorkflow DeviceApprovals UnitWorkflow BreakerWorkflow MigrationLimiter Migration Rollout ClaimHygiene NodeWorkflow
# The seams between parties, each simulated in the package of its parts (package:name): the
# breaker with three workers' permit caches; a unit's and its forms' workflows over one set of rules;
# node steps beside earlier tries' objects and another node's step; resets retried on API errors;
# on a real server, an approval and a report that reach a device workflow in one workflow task.
SIM_SEAMS = worker/permits:Permits worker:ApprovalsOnAServer activities/remediation:RuleOwners activities/remediation:NodeSteps activities/remediation:ResetRetries activities/remediation:ResetDomains internal/promsignal:Tracker
# A process runs at most SIM_CHUNK sequences: the SDK's test environment keeps an activity that
# waits to retry when its run ends (a goroutine and the environment), so memory grows with the
# sequences a process runs (about 330 KB each for the migration).
SIM_CHUNK ?= 5000
simulate: ## Long simulations: make simulate N=100000 [SEED=...] [SIM_WORKFLOWS=...]: N generated sequences per workflow, with the sequences a second
	@set -e; bin=$$(mktemp -d)/workflows.test; $(GO) test -c -o $$bin ./workflows/; cd workflows; \
	for wf in $(SIM_WORKFLOWS); do \
		left=$(N); chunk=0; start=$$(date +%s.%N); \
		while [ $$left -gt 0 ]; do \
			n=$$(( left < $(SIM_CHUNK) ? left : $(SIM_CHUNK) )); out=$$(mktemp); \
			if ! $$bin -test.count=1 -test.timeout=0 -test.v -test.run "^TestSimulate$$wf\$$" -rapid.checks=$$n $(if $(SEED),-rapid.seed=$$(( $(SEED) + chunk ))) >$$out 2>&1; then \
				grep -v '\[rapid\] draw' $$out; echo "FAIL: $$wf (chunk $$chunk)"; exit 1; fi; \
			rm -f $$out; left=$$(( left - n )); chunk=$$(( chunk + 1 )); \
		done; \
		end=$$(date +%s.%N); \
		awk -v wf=$$wf -v n=$(N) -v s=$$start -v e=$$end 'BEGIN { printf "%-17s %7d sequences in %6.0f s: %5.0f a second\n", wf, n, e - s, n / (e - s) }'; \
	done; \
	cd ..; for sim in $(SIM_SEAMS); do \
		pkg=$${sim%%:*}; name=$${sim##*:}; start=$$(date +%s.%N); out=$$(mktemp); \
		if ! $(GO) test ./$$pkg/ -count=1 -timeout=0 -run "^TestSimulate$$name\$$" -rapid.checks=$(N) $(if $(SEED),-rapid.seed=$(SEED)) >$$out 2>&1; then \
			grep -v '\[rapid\] draw' $$out; echo "FAIL: $$name"; exit 1; fi; \
		rm -f $$out; \
		end=$$(date +%s.%N); \
		awk -v wf=$$name -v n=$(N) -v s=$$start -v e=$$end 'BEGIN { printf "%-17s %7d sequences in %6.0f s: %5.0f a second\n", wf, n, e - s, n / (e - s) }'; \
	done

mutation: ## Mutation testing (gremlins) of the decision, orchestration, activity and watcher packages, then the mutants gremlins cannot reach
	@for p in $(MUTATION_PKGS); do \
		echo "==> gremlins: $$p"; \
		$(GREMLINS) unleash --timeout-coefficient 5 -S lt ./$$p 2>&1 | grep -E "LIVED|TIMED OUT|NOT COVERED|Killed|Test efficacy|Mutator coverage" ; \
		echo "==> casemut: the NOT COVERED mutants of $$p (switch cases, constants), run through go test -overlay"; \
		$(GREMLINS) unleash --dry-run ./$$p 2>&1 | $(GO) run ./internal/casemut ./$$p | grep -v "^KILLED" ; \
	done

clean:
	rm -rf bin
