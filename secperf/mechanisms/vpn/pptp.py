"""PPTP, which the 2001 study measured, cannot run on a kernel without PPP.

pptpd and pptp-linux are packaged, but both hand the session to pppd, which
needs the kernel's PPP driver (/dev/ppp, CONFIG_PPP; MPPE for encryption) and
GRE; this machine's kernel has none of them built in and cannot load modules.
There is no user-space PPP to fall back on, so secperf refuses PPTP with the
reason rather than measure something else under its name.
"""

from __future__ import annotations

from pathlib import Path

from secperf.errors import MechanismError

DEV_PPP = Path("/dev/ppp")

REASON = (
    "PPTP hands its sessions to pppd, which needs the kernel's PPP driver (/dev/ppp, "
    "CONFIG_PPP with MPPE) and GRE"
)


def refuse(dev_ppp: Path = DEV_PPP) -> MechanismError:
    """The error for a PPTP tunnel, saying what this machine lacks."""
    found = (
        f"{dev_ppp} is missing: this kernel has no PPP driver"
        if not dev_ppp.exists()
        else f"{dev_ppp} exists, but secperf has no PPTP implementation to drive it"
    )
    return MechanismError(
        f"vpn implementation 'pptp' cannot run: {REASON}; {found}",
        fix="measure another VPN (wireguard, openvpn, ipsec, tinc, vtun); "
        "docs/studies/003.md says why PPTP is absent",
    )
