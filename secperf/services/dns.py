"""The testbed's DNS server: dnsmasq with a forward and a PTR record for every address
of every host of the graph (seed 001's proxy looks its clients up in reverse).

dnsmasq runs in the foreground (`--keep-in-foreground`) through the host's `spawn`,
reads nothing but the hosts file secperf writes (`--no-resolv --no-hosts`, no
upstream server: it answers only for the testbed's names and refuses the rest),
listens on one testbed address, and logs every query to a file of the run
(`--log-queries`), which is how tests and results count look-ups.

Names are `<host>.DOMAIN` (DOMAIN = "testbed.secperf"), with the bare host name as
an alias; the reverse record of each address answers the qualified name.

`query()` is a minimal DNS client (one UDP question, parsed answer) run with the
host's python3, so look-ups need no dig/host on the machine.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import time
from dataclasses import dataclass
from pathlib import Path

from secperf.errors import SecperfError
from secperf.services import privdrop
from secperf.testbed.testbed import Host, ManagedProcess
from secperf.testbed.topology import Topology
from secperf.tools import find_program

DOMAIN = "testbed.secperf"
DNS_PORT = 53
# dnsmasq drops to these once its socket is bound (dnsmasq-base makes no user of its own).
DNS_USER = "nobody"
DNS_GROUP = "nogroup"
START_TIMEOUT_S = 10.0


class DnsError(SecperfError):
    """The DNS server could not be configured or did not start."""


def dnsmasq_path() -> str:
    return find_program("dnsmasq", purpose="the testbed's DNS server", package="dnsmasq-base")


def host_records(topology: Topology) -> list[tuple[str, str]]:
    """(address, host name) for every address of every non-switch host, IPv4 then IPv6."""
    records: list[tuple[str, str]] = []
    for family in (4, 6):
        for spec in topology.hosts:
            if spec.is_switch:
                continue
            for link in topology.links_of(spec.name):
                table = link.addr4 if family == 4 else link.addr6
                if spec.name in table:
                    records.append((str(table[spec.name].ip), spec.name))
    return records


def render_hosts(topology: Topology) -> str:
    lines = ["# written by secperf: every testbed address and its host"]
    lines += [f"{addr} {name}.{DOMAIN} {name}" for addr, name in host_records(topology)]
    return "\n".join(lines) + "\n"


def render_args(
    directory: Path, address: str, port: int = DNS_PORT, own: Path | None = None
) -> list[str]:
    """dnsmasq's command line: it binds and writes its pid file in `directory` as root,
    then drops to DNS_USER, reading its hosts file and writing its query log in `own`
    (its folder, services/privdrop.py; `directory` when not given)."""
    d = directory.resolve()
    w = (own or directory).resolve()
    return [
        dnsmasq_path(),
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--no-poll",
        f"--addn-hosts={w}/hosts",
        f"--listen-address={address}",
        "--bind-interfaces",
        f"--port={port}",
        f"--domain={DOMAIN}",
        "--local=/testbed.secperf/",
        "--log-queries",
        f"--log-facility={w}/queries.log",
        f"--pid-file={d}/dnsmasq.pid",
        f"--user={DNS_USER}",
        f"--group={DNS_GROUP}",
        "--local-ttl=0",  # answers are not to be kept: a resolver asks again
        "--cache-size=0",  # every look-up is answered (and logged) by the server itself
    ]


_CLIENT = r"""
import json, random, socket, struct, sys
server, port, qname, qtype = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
qid = random.randrange(65536)
q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in qname.split(".") if p) + b"\0"
q += struct.pack(">HH", qtype, 1)
fam = socket.AF_INET6 if ":" in server else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(float(sys.argv[5]))
s.sendto(q, (server, port))
try:
    r, _ = s.recvfrom(4096)
except socket.timeout:
    print(json.dumps({"error": "timeout"})); sys.exit(0)
def name(buf, i):
    out = []
    while True:
        n = buf[i]
        if n & 0xC0 == 0xC0:
            out.append(name(buf, ((n & 0x3F) << 8) | buf[i + 1])[0]); return ".".join(out), i + 2
        if n == 0:
            return ".".join(out), i + 1
        out.append(buf[i + 1:i + 1 + n].decode()); i += n + 1
rid, flags, qd, an = struct.unpack(">HHHH", r[:8])
i = 12
for _ in range(qd):
    _, i = name(r, i); i += 4
answers = []
for _ in range(an):
    _, i = name(r, i)
    t, _, _, ln = struct.unpack(">HHIH", r[i:i + 10]); i += 10
    data = r[i:i + ln]
    if t == 12: answers.append(name(r, i)[0])
    elif t == 1: answers.append(socket.inet_ntop(socket.AF_INET, data))
    elif t == 28: answers.append(socket.inet_ntop(socket.AF_INET6, data))
    i += ln
print(json.dumps({"rcode": flags & 0xF, "answers": answers, "id_ok": rid == qid}))
"""


def reverse_name(address: str) -> str:
    return ipaddress.ip_address(address).reverse_pointer


def query(
    host: Host,
    server: str,
    name: str,
    qtype: str = "A",
    *,
    port: int = DNS_PORT,
    timeout: float = 2,
) -> list[str]:
    """Ask `server` from `host` for `name` (qtype A, AAAA or PTR); the answers' data.

    PTR with an address as `name` asks for its reverse name. DnsError on a timeout."""
    types = {"A": 1, "PTR": 12, "AAAA": 28}
    if qtype == "PTR" and (":" in name or name.replace(".", "").isdigit()):
        name = reverse_name(name)
    argv = ["python3", "-c", _CLIENT, server, str(port), name, str(types[qtype]), str(timeout)]
    out = json.loads(host.run(argv, timeout=timeout + 10).stdout)
    if "error" in out:
        raise DnsError(f"no answer from {server}:{port} for {qtype} {name} within {timeout} s")
    return [str(a) for a in out["answers"]]


@dataclass
class DnsServer:
    host: Host
    directory: Path
    address: str
    port: int
    process: ManagedProcess
    # dnsmasq's folder (hosts file, query log): root's, under privdrop.RUN_ROOT.
    own: Path | None = None

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        path = (self.own or self.directory) / "queries.log"
        return path.read_text(errors="replace") if path.is_file() else ""

    def queries(self, qtype: str | None = None) -> int:
        """How many questions the server was asked so far (of `qtype`, e.g. "PTR")."""
        tag = f"query[{qtype}]" if qtype else "query["
        return sum(1 for line in self.log().splitlines() if tag in line)

    def stop(self) -> None:
        """Stop dnsmasq; its query log comes back into `directory`, its folder goes."""
        self.process.stop()
        if self.own is not None:
            privdrop.collect(self.own, ["queries.log"], self.directory)
            privdrop.remove_folder(self.host.ledger, self.own)
            self.own = None


def start_dns(
    host: Host, directory: Path, address: str, topology: Topology, *, port: int = DNS_PORT
) -> DnsServer:
    """Start dnsmasq in `host` on `address`:`port` with the records of `topology`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hosts").write_text(render_hosts(topology))
    # Its folder: the hosts file copied in as root's, the query log made by root and
    # given to DNS_USER (dnsmasq opens it as root, then writes it as that user).
    name = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]
    own = privdrop.RUN_ROOT / f"dns-{name}"
    privdrop.make_folder(host.ledger, own, DNS_USER, ["queries.log"], [directory / "hosts"])
    argv = render_args(directory, address, port, own)
    (directory / "dnsmasq.argv").write_text(" ".join(argv) + "\n")
    errors = directory / "stderr.log"
    with privdrop.open_nofollow(errors) as err:
        proc = host.spawn(argv, stdout=err, stderr=err, label="dnsmasq")
    server = DnsServer(
        host=host, directory=directory, address=address, port=port, process=proc, own=own
    )
    me = host_records(topology)[0][1]
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and server.alive():
        try:
            if query(host, address, me, port=port, timeout=0.5):
                return server
        except DnsError:
            continue
    server.stop()
    detail = errors.read_text(errors="replace") if errors.is_file() else ""
    raise DnsError(
        f"dnsmasq did not answer on {address}:{port} in {host.name} within "
        f"{START_TIMEOUT_S:.0f} s: {detail.strip()[-500:] or 'no output'}",
        where=str(directory / "dnsmasq.argv"),
        fix="check that the port is free in that host and that dnsmasq starts with those options",
    )
