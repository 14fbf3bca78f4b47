#!/usr/bin/env bash
# Runs every check dlock has, one line per step, and ends with a verdict.
# A failing step's output is printed in full. The tests start their own
# redis-server processes on free loopback ports.
#
# Installs with apt-get, when root and missing: redis-server (every test),
# tmux (the CLI's terminal tests), zsh, fish and groff (the CLI's completion
# and man page tests). Without root those tests skip, saying so.
set -uo pipefail
cd "$(dirname "$0")"

started=$SECONDS
logs=$(mktemp -d)
steps=0

# step NAME CMD...: runs CMD quietly; on failure prints its output and the
# verdict, and exits.
step() {
	local name=$1 t0=$SECONDS
	shift
	if "$@" >"$logs/$name.log" 2>&1; then
		steps=$((steps + 1))
		printf 'test.sh: %-10s ok  %4ds\n' "$name" $((SECONDS - t0))
		return
	fi
	printf 'test.sh: %-10s FAIL %3ds\n' "$name" $((SECONDS - t0))
	grep -v '^go: downloading' "$logs/$name.log"
	echo "test.sh: FAILED at step $name ($steps steps passed before it, $((SECONDS - started)) s)"
	exit 1
}

install() {
	local missing=""
	command -v redis-server >/dev/null || missing="redis-server"
	for tool in tmux zsh fish groff; do
		local package=$tool
		[ "$tool" = groff ] && package=groff-base
		command -v "$tool" >/dev/null || missing="$missing $package"
	done
	[ -z "$missing" ] && return 0
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		echo "missing:$missing (apt-get install$missing)"
		command -v redis-server >/dev/null # only redis-server is required
		return
	fi
	echo "installing:$missing"
	# The tests start their own servers: keep the package from starting its
	# service, which fails without an init system or with port 6379 taken.
	local policy=/usr/sbin/policy-rc.d
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"
		trap 'rm -f "$policy"' EXIT
	fi
	apt-get update -qq &&
		# shellcheck disable=SC2086 # one package per word
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
}

# The oldest Go go.mod declares builds and vets the library (the toolchain
# comes from the module proxy, once).
oldest_go() {
	local v
	v=$(sed -n 's/^go //p' go.mod)
	GOTOOLCHAIN=go$v go vet ./...
}

echo "test.sh: $(go version | cut -d' ' -f3-); $(command -v redis-server >/dev/null && redis-server --version | cut -d' ' -f1-3)"
step install install
step vet go vet ./...
step oldest-go oldest_go
# -parallel 8: the tests marked parallel wait on timers and servers of
# their own, not on the CPU; two cores would run only two at once.
step root go test -race -count=1 -parallel 8 -timeout 8m ./...
# Allocation counts, which the race detector changes.
step allocs go test -count=1 -timeout 2m -run 'Allocate' .
# The fault-injection suite is a module of its own (Toxiproxy stays out of
# dlock's go.mod) behind the faults tag. The soak: see faults/doc.go.
step faults bash -c 'cd faults && go vet -tags faults ./... && go test -tags faults -race -count=1 -timeout 6m -skip "TestExplore$" .'
# The explorer: 16 fixed seeds, two fixed cases and one fresh seed, without
# -race (its checks judge timing, which the race detector slows fivefold),
# and the check of its network probe, which the race detector's shuffled
# scheduler defeats.
step explorer bash -c 'cd faults && go test -tags faults -count=1 -timeout 6m -run "TestExplore$|TestNetProbe_" .'
# The OpenTelemetry observer, a module of its own.
step dlockotel bash -c 'cd dlockotel && go vet ./... && go test -count=1 -timeout 3m ./...'
# The peer benchmark, a module of its own: one short round, so a broken
# harness shows here, not when someone measures.
step bench bash -c 'cd bench && go vet ./... && go run . -quick -out "$(mktemp)"'

echo "test.sh: all checks passed ($steps steps in $((SECONDS - started)) s)"
