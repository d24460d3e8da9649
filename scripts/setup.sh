#!/usr/bin/env bash
# Install what secperf needs on a Debian 12 machine, only what is missing:
# Debian packages (--no-install-recommends), a Python venv with secperf in it,
# and the release build of secperf-engine. Safe to run again: it does nothing
# when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(iproute2 nftables iptables ipset conntrack ethtool iputils-ping procps
          iperf3 sockperf python3-venv netsniff-ng hping3
          libhyperscan-dev fwsnort  # ips: the nfq matcher links Hyperscan; fwsnort = kernel engine
          chromium  # chromium: the test that renders report.html in a real browser
          # VPN tunnels (secperf.mechanisms.vpn) and the capture that proves them encrypted.
          # --no-install-recommends matters: wireguard-tools recommends a kernel image.
          openvpn openssl wireguard-go wireguard-tools tinc vtun tcpdump util-linux
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
          # the kernel's softirq time, exactly (irq:softirq_entry/exit tracepoints), in
          # the traced round of each point (docs/methodology.md, "The mechanism's own cost")
          bpftrace
          # perf (cpu-clock sampling, no PMU needed): the attribution round's CPU profile
          # of each configuration, where the cost goes (docs/methodology.md, "Where the cost goes")
          linux-perf)

need=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ! command -v cargo >/dev/null 2>&1; then need+=(cargo); fi
# http workloads serve files with nginx; any nginx flavour will do (nginx-light is the smallest).
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then need+=(nginx-light); fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${need[*]}; run as root (or apt-get install them)" >&2
    exit 1
  fi
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

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

echo "setup: building secperf-engine (release)"
cargo build --release --quiet --manifest-path engine/Cargo.toml
# The copy for remote hosts (secperf/testbed/hosts/ssh.py): glibc linked in statically, so a
# lab machine needs only x86_64 Linux, not this machine's glibc.
echo "setup: building the static secperf-engine for remote hosts"
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --quiet \
  --manifest-path engine/Cargo.toml -p secperf-engine \
  --target x86_64-unknown-linux-gnu --target-dir engine/target/static
