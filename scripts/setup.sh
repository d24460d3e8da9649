#!/usr/bin/env bash
# Install what secperf needs on a Debian 12 machine, only what is missing: Debian
# packages (--no-install-recommends), a Python venv with secperf in it, and the release
# build of secperf-engine. Safe to run again: it does nothing when everything is there.
#
#   setup.sh          what `make run` needs: scenarios/quick.toml (an nftables ACL with
#                     stream, rr and crr), the engine's build and the venv
#   setup.sh --all    everything the tests and benches use (`make test`)
#   setup.sh --list [--all]   print the packages and exit
#
# No service is started or left enabled: packages go in through
# scripts/quiet-apt-install.sh (docs/security.md, "What setup installs"). With
# SECPERF_SETUP_PACKAGES_ONLY=1 it installs the packages and stops (no venv, no cargo
# build): the tests of setup use it.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=run
list=0
for arg in "$@"; do
  case "$arg" in
    --all) mode=all ;;
    --list) list=1 ;;
    *) echo "setup: unknown argument $arg (use --all, --list)" >&2; exit 2 ;;
  esac
done

# scenarios/quick.toml: ip and tc (iproute2), nft, conntrack (secperf.run.preflight's
# tools_for); python3-venv for .venv; bpftrace and perf for its traced and attribution
# rounds (the softirq time, the hot rules' CPU profile).
RUN_PACKAGES=(iproute2 nftables conntrack procps python3-venv bpftrace linux-perf)

ALL_PACKAGES=("${RUN_PACKAGES[@]}" iptables ipset ethtool iputils-ping
          iperf3 sockperf netsniff-ng hping3
          libhyperscan-dev fwsnort  # ips: the nfq matcher links Hyperscan; fwsnort = kernel engine
          chromium  # chromium: the test that renders report.html in a real browser
          # VPN tunnels (secperf.mechanisms.vpn) and the capture that proves them encrypted.
          # --no-install-recommends matters: wireguard-tools recommends a kernel image.
          openvpn openssl wireguard-go wireguard-tools tinc vtun tcpdump  # (util-linux, for unshare, is Essential)
          strongswan-charon strongswan-swanctl libcharon-extra-plugins
          libstrongswan-standard-plugins libstrongswan-extra-plugins
          # the proxy study (seed 001): proxies, FTP and DNS servers, FTP clients
          # squid-openssl: squid with ssl-bump (the tls_inspect mechanism); it replaces
          # Debian's squid (GnuTLS) and serves the proxy mechanism as well
          squid-openssl ftp-proxy vsftpd dnsmasq-base curl lftp
          # the DUT as a VM (secperf.testbed.hosts.vm): qemu only; the guest's kernel and
          # root file system are built by secperf from Debian packages it downloads
          # (apt-get download + dpkg -x into ~/.cache/secperf/vm-image), never installed
          qemu-system-x86
          dante-server  # the circuit-level proxy (proxy level = "circuit")
          wrk  # bench/http_ftp_vs_peers.py: the engine's HTTP client against wrk
          # remote hosts: the tests run real OpenSSH servers in namespaces as the "remote" machines
          openssh-server openssh-client
          )

if [ "$mode" = all ]; then PACKAGES=("${ALL_PACKAGES[@]}"); else PACKAGES=("${RUN_PACKAGES[@]}"); fi
if [ "$list" -eq 1 ]; then printf '%s\n' "${PACKAGES[@]}"; exit 0; fi

need=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ! command -v cargo >/dev/null 2>&1; then need+=(cargo); fi
# http workloads serve files with nginx; any nginx flavour will do (nginx-light is the smallest).
if [ "$mode" = all ] && ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  need+=(nginx-light)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${need[*]}; run as root (or apt-get install them)" >&2
    exit 1
  fi
  echo "setup: installing ${need[*]} (no service started or enabled)"
  bash scripts/quiet-apt-install.sh "${need[@]}"
fi
if [ "${SECPERF_SETUP_PACKAGES_ONLY:-0}" = 1 ]; then exit 0; fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.secperf-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing secperf and its Python dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  touch "$stamp"
fi

if [ "$mode" = run ]; then
  # quick.toml needs the engine only; the NFQUEUE daemon (secperf-nfq, Hyperscan) is
  # built by `setup.sh --all`.
  echo "setup: building secperf-engine (release)"
  cargo build --release --quiet --manifest-path engine/Cargo.toml -p secperf-engine
  exit 0
fi
echo "setup: building secperf-engine and secperf-nfq (release)"
cargo build --release --quiet --manifest-path engine/Cargo.toml
# The copy for remote hosts (secperf/testbed/hosts/ssh.py): glibc linked in statically, so a
# lab machine needs only x86_64 Linux, not this machine's glibc.
echo "setup: building the static secperf-engine for remote hosts"
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --quiet \
  --manifest-path engine/Cargo.toml -p secperf-engine \
  --target x86_64-unknown-linux-gnu --target-dir engine/target/static
