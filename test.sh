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

# step NAME CMD...: runs CMD quietly and prints one line; on failure, its
# output too. It leaves NAME.ok or NAME.failed in $logs for the verdict.
step() {
	local name=$1 t0=$SECONDS
	shift
	if "$@" >"$logs/$name.log" 2>&1; then
		touch "$logs/$name.ok"
		printf 'test.sh: %-10s ok   %4ds\n' "$name" $((SECONDS - t0))
		return 0
	fi
	touch "$logs/$name.failed"
	printf 'test.sh: %-10s FAIL %4ds\n' "$name" $((SECONDS - t0))
	grep -v '^go: downloading' "$logs/$name.log"
	return 1
}

# verdict ends the run: all passed, or which steps failed.
verdict() {
	local passed failed
	passed=$(find "$logs" -name '*.ok' | wc -l)
	failed=$(cd "$logs" && ls -- *.failed 2>/dev/null | sed 's/\.failed$//' | tr '\n' ' ')
	if [ -z "$failed" ]; then
		echo "test.sh: all checks passed ($passed steps in $((SECONDS - started)) s)"
		exit 0
	fi
	echo "test.sh: FAILED: ${failed% } ($passed steps passed, $((SECONDS - started)) s)"
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
step install install || verdict
step vet go vet ./... || verdict

# Two lanes at once: the tests mostly wait on servers and timers of their
# own, so together they take about the time of the longer lane.
# Lane 1: every package of the library with the race detector. -parallel 8:
# the tests marked parallel wait, not compute; two cores would run two.
step root go test -race -count=1 -parallel 8 -timeout 8m ./... &
lane1=$!
# Lane 2: the fault-injection suite, a module of its own (Toxiproxy and
# porcupine stay out of dlock's go.mod) behind the faults tag (the soak:
# faults/doc.go), with its linearizability checker, faults/linear;
# then the oldest Go, allocation counts (which the race detector changes),
# the OpenTelemetry observer's module, and one short round of the peer
# benchmark's module, so a broken harness shows here.
(
	step faults bash -c 'cd faults && go vet -tags faults ./... && go test -tags faults -race -count=1 -timeout 6m -skip "TestExplore$" ./...'
	step oldest-go oldest_go
	step allocs go test -count=1 -timeout 2m -run 'Allocate' .
	step dlockotel bash -c 'cd dlockotel && go vet ./... && go test -count=1 -timeout 3m ./...'
	step bench bash -c 'cd bench && go vet ./... && go build -o "$0" . && timeout 5m "$0" -quick -out "$(mktemp)"' "$logs/bench.bin"
) &
lane2=$!
wait $lane1 $lane2

# Alone, as its checks judge timing: the explorer (fixed seeds and cases,
# one fresh seed) without -race, which slows it fivefold, and the check of
# its network probe, which the race detector's shuffled scheduler defeats.
step explorer bash -c 'cd faults && go test -tags faults -count=1 -timeout 6m -run "TestExplore$|TestNetProbe_" .'
verdict
