#!/usr/bin/env bash
# Runs every check dlock has: go vet, then all tests with the race detector
# against real redis-server processes the tests start themselves.
# Installs redis-server with apt-get when it is missing and we are root;
# otherwise says what to install.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: redis-server missing; installing it with apt-get"
    # The tests start their own servers: keep the package from starting its
    # service, which fails without an init system or with port 6379 taken.
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"
      trap 'rm -f "$policy"' EXIT
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    echo "test.sh: redis-server is required. Install Redis 7, e.g." >&2
    echo "  Debian/Ubuntu: sudo apt-get install redis-server" >&2
    echo "  macOS:         brew install redis" >&2
    exit 1
  fi
fi

# The CLI's terminal tests drive dlock run in a tmux session, and its
# completion and man page tests run zsh, fish and groff; without them those
# tests skip, saying so.
missing=""
for tool in tmux zsh fish groff; do
  package=$tool
  [ "$tool" = groff ] && package=groff-base
  command -v "$tool" >/dev/null 2>&1 || missing="$missing $package"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: missing:$missing; installing with apt-get"
    apt-get update -qq
    # shellcheck disable=SC2086 # one package per word
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  else
    echo "test.sh: missing:$missing: the CLI tests that need them will skip (apt-get install$missing)" >&2
  fi
fi

echo "test.sh: $(go version); $(redis-server --version | cut -d' ' -f1-3)"
go vet ./...
# -parallel 8: the tests marked parallel wait on timers and servers of
# their own, not on the CPU; two cores would run only two at once.
go test -race -count=1 -parallel 8 -timeout 8m ./...
# The fault-injection suite is a module of its own (Toxiproxy stays out of
# dlock's go.mod) behind the faults tag; CI runs its short profile, about
# two minutes. The soak profile: cd faults && go test -tags faults -long .
(cd faults && go vet -tags faults ./... && go test -tags faults -race -count=1 -timeout 6m -skip 'TestExplore$' .)
# The explorer: randomized, replayable runs of every lock type under faults
# (16 fixed seeds, two fixed cases and one fresh seed, in two lanes: about a minute).
# Without -race: its checks judge timing, which the race detector slows
# fivefold. A soak: cd faults && go test -tags faults -run Explore -explore 30m .
# The explorer's own tests ran in the step before, with -race.
(cd faults && go test -tags faults -count=1 -timeout 6m -run 'TestExplore$' .)
# Allocation counts, which the race detector changes: without it (the
# library is built so already, for the explorer).
go test -count=1 -timeout 2m -run 'Allocate' .
# The OpenTelemetry observer is a module of its own (OpenTelemetry stays
# out of dlock's go.mod); its tests take seconds against one redis-server.
(cd dlockotel && go vet ./... && go test -count=1 -timeout 3m ./...)
# The peer benchmark is a module of its own: build and vet it, and run one
# short round so a broken harness shows here, not when someone measures.
(cd bench && go vet ./... && go run . -quick -out "$(mktemp)" >/dev/null)
