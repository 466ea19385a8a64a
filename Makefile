# moat — see README.md. Every target runs as root on Debian 12 and installs what it needs.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
BIN := bin
GOFLAGS_BUILD := -trimpath

.PHONY: all deps build demo test test-short test-cluster bench fuzz vet lint clean

all: build

# Debian packages the project uses: OCI runtimes, mkfs for drives, git for repo layers,
# mkfs.xfs for the reflink pool that makes snapshots and forks copy-free, criu for runc's memory checkpoints (`moat doctor` says whether it works on this kernel), debootstrap for `moat template build debian`, nftables for the network boundary;
# python3, procps, iproute2, sudo and curl are programs the tests and the demo run inside sandboxes of
# the default template (which shows the host's /usr); the demo makes its stand-in API's
# certificate with openssl.
# protoc regenerates api/envd for the lint gate's check that generated code is current; criu is
# probed by `moat doctor` for runc's memory checkpoints. gcc, pkg-config and libseccomp-dev
# build the pinned runc (scripts/runtimes.sh), which moat prefers, with the pinned runsc, over
# Debian's runc 1.1.5 and runsc 2022-12 (kept as fallbacks: `moat doctor` says which is used).
DEB_TOOLS := runc crun runsc mkfs.ext4 mkfs.xfs git debootstrap nft python3 ps ip losetup sudo curl openssl protoc criu gcc pkg-config chromium
# The web console's front end (npm project; make build bundles it into internal/console/dist).
CONSOLE_WEB := internal/console/web
deps:
	@missing=; for t in $(DEB_TOOLS); do command -v $$t >/dev/null || missing=1; done; \
	pkg-config --exists libseccomp 2>/dev/null || missing=1; \
	if [ -n "$$missing" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    runc crun runsc e2fsprogs xfsprogs git debootstrap nftables util-linux ca-certificates criu \
	    python3 procps iproute2 sudo curl openssl protobuf-compiler gcc libc6-dev pkg-config libseccomp-dev chromium >/dev/null; \
	fi
	$(GO) mod download
	./scripts/runtimes.sh
	@# The E2B conformance tests drive the real e2b npm package (pinned in its lockfile).
	@command -v node >/dev/null || { echo "node (>= 20.18) is needed for the E2B tests"; exit 1; }
	@if [ ! -d test/e2b/node_modules ] || [ test/e2b/package-lock.json -nt test/e2b/node_modules ]; then \
	  npm ci --prefix test/e2b --no-audit --no-fund --loglevel=error; fi
	@# The web console's xterm.js and esbuild (pinned in its lockfile); chromium runs its browser tests.
	@if [ ! -d $(CONSOLE_WEB)/node_modules ] || [ $(CONSOLE_WEB)/package-lock.json -nt $(CONSOLE_WEB)/node_modules ]; then \
	  npm ci --prefix $(CONSOLE_WEB) --no-audit --no-fund --loglevel=error; fi

build: deps
	npm run --prefix $(CONSOLE_WEB) --silent build
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -ldflags='-s -w' -o $(BIN)/moat-init ./cmd/moat-init
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/moat ./cmd/moat

# A real agent-like task in a sandbox: check out a small project, run its tests, fix a bug,
# show the diff, and show what the sandbox could not do.
demo: build
	./scripts/demo.sh

vet: deps
	$(GO) vet ./...

# The lint gate: gofmt, vet, staticcheck, dead code (deadcode -test), and api/envd equal to
# what api/generate.sh makes. Its tools are pinned here and built from the Go module proxy.
LINT_TOOLS := honnef.co/go/tools/cmd/staticcheck@v0.8.2 golang.org/x/tools/cmd/deadcode@v0.52.0 \
	google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12 connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
lint: deps
	@mkdir -p $(BIN)/tools; for t in $(LINT_TOOLS); do \
	  n=$${t%@*}; n=$${n##*/}; v=$${t##*@}; \
	  [ -x $(BIN)/tools/$$n ] && [ "$$(cat $(BIN)/tools/$$n.version 2>/dev/null)" = "$$v" ] && continue; \
	  GOBIN=$(CURDIR)/$(BIN)/tools $(GO) install $$t && echo $$v > $(BIN)/tools/$$n.version || exit 1; done
	TOOLS=$(BIN)/tools ./scripts/lint.sh

# The whole suite, as root, with real runtimes, namespaces, overlayfs and SQLite.
test: build lint
	MOAT_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 40m -p 2 ./...

test-short: build
	MOAT_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -short ./...

# A real, local Kubernetes control plane on loopback (docs/cluster.md): builds the pinned
# kube-apiserver, controller manager, scheduler, kubectl and etcd into /var/cache/moat-kube
# (about 6 minutes cold, seconds warm), then runs the nested cluster modules' tests.
test-cluster: build
	./scripts/kube-tools.sh >/dev/null
	cd test/cluster/harness && $(GO) test -count=1 ./...
	cd test/cluster/tools && $(GO) test -count=1 -timeout 20m ./...
	cd kube && MOAT_BIN=$(CURDIR)/$(BIN) MOAT_TEST_CLUSTER=1 $(GO) test -count=1 -p 1 -timeout 20m ./...
	@# The front's Kubernetes client (internal/kubeapi) against a control plane of its own.
	d=$$(mktemp -d /tmp/moat-kubeapi.XXXXXX) && ./scripts/test-cluster.sh up $$d >/dev/null && \
	  { MOAT_KUBECONFIG=$$d/admin.kubeconfig $(GO) test -count=1 -run '^TestCluster$$' ./internal/kubeapi/; rc=$$?; \
	    ./scripts/test-cluster.sh down $$d >/dev/null; rm -rf $$d; exit $$rc; }

# bench: every figure, with the system-call one (moat bench --syscalls: runc, the runsc of 2022 and the current runsc).
bench: build
	$(BIN)/moat bench --syscalls
	go test -run '^$$' -bench '^BenchmarkEgress$$|^BenchmarkCredentials$$' -benchtime 3000x ./internal/egress/
	@# The proxy's added latency and throughput, each iteration direct and proxied alternately.
	go test -run '^$$' -bench 'BenchmarkEgressOverhead' -benchtime 1500x ./internal/egress/
	MOAT_BIN=$(CURDIR)/$(BIN) go test -run '^$$' -bench 'BenchmarkE2BTTI' -benchtime 1x ./test/e2b/

fuzz: deps
	./scripts/fuzz.sh

clean:
	rm -rf $(BIN)
