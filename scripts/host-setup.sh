#!/usr/bin/env bash
# Make sure this host can build images: a Docker engine that answers, and mmdebstrap for bases made without a
# registry (with --test, also what the test suite needs). As root on Debian/Ubuntu it installs and starts what is missing, saying what it does; elsewhere
# it says how. (imgbuild itself never installs system software; this script is the Makefile's set-up.)
set -euo pipefail
say() { echo "host-setup: $*" >&2; }
can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_install() {
    say "installing $* with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

engine_answers() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }

if ! command -v mmdebstrap >/dev/null 2>&1; then
    if can_install; then apt_install mmdebstrap; else say "mmdebstrap is missing (needed only where no registry answers): apt-get install mmdebstrap"; fi
fi

# skopeo: the registry-side reads and copies of `imgbuild lookup` and `imgbuild promote`.
if ! command -v skopeo >/dev/null 2>&1; then
    if can_install; then apt_install skopeo; else say "skopeo is missing (needed by imgbuild lookup and promote): apt-get install skopeo"; fi
fi

# The engine decompresses pulled layers with unpigz when it is on PATH (Docker 20.10+), about twice as fast as
# Go's gzip: a registry hit (`imgbuild build --registry`) is mostly that.
if ! command -v unpigz >/dev/null 2>&1; then
    if can_install; then apt_install pigz; else say "pigz is missing (faster pulls): apt-get install pigz"; fi
fi

# --test: the push tests run Debian's docker-registry on 127.0.0.1, with htpasswd (apache2-utils) for auth;
# the browser test drives Debian's chromium (Playwright's own browser download is not used); the diff test
# runs diffoscope (`imgbuild diff --diffoscope`; the minimal package: tar and text, no heavy comparators).
if [ "${1:-}" = "--test" ] && ! { command -v docker-registry && command -v htpasswd && [ -x /usr/bin/chromium ] && command -v diffoscope; } >/dev/null 2>&1; then
    if can_install; then apt_install docker-registry apache2-utils chromium diffoscope-minimal; else say "the tests need: apt-get install docker-registry apache2-utils chromium diffoscope-minimal"; fi
fi

if engine_answers; then
    exit 0
fi
if [ -n "${DOCKER_HOST:-}" ]; then
    say "no Docker engine answers at DOCKER_HOST=$DOCKER_HOST; start it, or unset DOCKER_HOST"
    exit 2
fi
if ! can_install; then
    say "no Docker engine answers: install Docker Engine (https://docs.docker.com/engine/install/) and start it"
    exit 2
fi
if ! command -v dockerd >/dev/null 2>&1; then
    apt_install docker.io
fi
if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
    say "starting the engine with systemctl"
    systemctl start docker
else
    log=/var/log/imgbuild-dockerd.log
    say "starting dockerd in the background (no systemd here); log: $log"
    setsid nohup dockerd >"$log" 2>&1 < /dev/null &
fi
for _ in $(seq 60); do
    if engine_answers; then
        say "engine ready: $(docker version --format 'Docker {{.Server.Version}}, API {{.Server.APIVersion}}')"
        exit 0
    fi
    sleep 1
done
say "the engine did not answer within 60 s; see its log"
exit 1
