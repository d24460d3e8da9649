#!/usr/bin/env bash
# Install Debian packages without starting or enabling any service: the one way secperf
# installs (scripts/setup.sh and `secperf doctor --install` both call it).
#
# - While apt-get runs, /usr/sbin/policy-rc.d exits 101, so no maintainer script starts
#   a daemon (invoke-rc.d and deb-systemd-invoke ask it). One already there is kept and
#   put back as it was.
# - Every systemd unit link the install made under /etc/systemd/system (a package's
#   postinst enabling its unit, as ssh, nginx or squid do) is removed again and written
#   in /var/lib/secperf/setup-disabled.txt (root only); links that were there before
#   stay as they were, the user's own included, and those of a unit of the packages
#   installed are written there as "kept".
#
# Usage: quiet-apt-install.sh PACKAGE...   (as root; nothing to do without packages)
# The tests point it elsewhere with SECPERF_POLICY_RC_D, SECPERF_SYSTEMD_DIR and
# SECPERF_SETUP_RECORD.
set -euo pipefail

policy=${SECPERF_POLICY_RC_D:-/usr/sbin/policy-rc.d}
units=${SECPERF_SYSTEMD_DIR:-/etc/systemd/system}
record=${SECPERF_SETUP_RECORD:-/var/lib/secperf/setup-disabled.txt}

[ $# -gt 0 ] || exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "quiet-apt-install: installing $* needs root" >&2
  exit 1
fi

packages=("$@")
work=$(mktemp -d)
saved=""
links_before="$work/before"
placed=0

links() { if [ -d "$units" ]; then find "$units" -type l | LC_ALL=C sort; fi; }

finish() {
  local rc=$?
  set +e
  # The policy first: whatever happened, the machine's own (or none) is back.
  if [ "$placed" -eq 1 ]; then
    rm -f -- "$policy"
    if [ -n "$saved" ]; then mv -f -- "$saved" "$policy"; fi
  fi
  if [ -f "$links_before" ]; then
    links > "$work/after"
    LC_ALL=C comm -13 "$links_before" "$work/after" > "$work/new"
    # The units the installed packages ship, to name the user's own links to them.
    dpkg-query -L "${packages[@]}" 2>/dev/null \
      | grep -E '/systemd/system/[^/]+\.(service|socket|timer|path|target|mount)$' \
      | xargs -r -n1 basename | LC_ALL=C sort -u > "$work/units"
    mkdir -p -m 0700 -- "$(dirname "$record")"
    (
      umask 077
      {
        echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) installed: ${packages[*]}"
        while IFS= read -r link; do
          echo "removed $link -> $(readlink -- "$link")"
          rm -f -- "$link"
        done < "$work/new"
        while IFS= read -r link; do
          name=$(basename -- "$(readlink -- "$link")")
          if grep -qxF -- "$(basename -- "$link")" "$work/units" \
            || grep -qxF -- "$name" "$work/units"; then
            echo "kept $link -> $(readlink -- "$link")"
          fi
        done < "$links_before"
      } >> "$record"
    )
    chmod 0600 -- "$record"
    if [ -s "$work/new" ]; then
      echo "quiet-apt-install: removed $(wc -l < "$work/new") unit link(s) the install made (see $record)"
    fi
  fi
  rm -rf -- "$work"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

if [ -e "$policy" ] || [ -L "$policy" ]; then
  saved="$policy.secperf-saved"
  if [ -e "$saved" ] || [ -L "$saved" ]; then
    echo "quiet-apt-install: $saved exists (a previous install was interrupted?); put it back as $policy and run again" >&2
    saved=""
    exit 1
  fi
  mv -- "$policy" "$saved"
fi
placed=1
printf '#!/bin/sh\n# secperf (scripts/quiet-apt-install.sh): no service starts while it installs\nexit 101\n' > "$policy"
chmod 0755 -- "$policy"

links > "$links_before"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
