"""Where a log line points: the far end it names (the peer that failed), else the host that printed it;
and the Slurm node behind an address. Pure.

A line printed by one host about another names both, and only the far end is the suspect: NCCL on node3
printing "Got completion from peer 10.0.0.4<43210>" or "Connection closed by remote peer node4<52170>" is
node3 reporting that node4 went away (docs/log-ingest.md, "Which host a line blames"). So:
- a line that names a peer (PEER below) blames the peer, and only the peer: the printing host (NCCL's
  `host:pid:tid` prefix, a syslog host, Ray's `ip=`) is the victim that noticed;
- a line without a peer blames the host it was printed on, where the line says it: a host name (the
  catalogue's locators), or an address (Ray's `(pid=..., ip=10.0.0.5)` worker prefix, `node_ip_address`);
- an address is not a node name: the live detector maps it to one with the job's nodes' NodeAddr
  (JobObserved.node_addrs, from Slurm) in node_of; offline (`relaunch classify`) there is no mapping and
  an address stays an address.

Formats (NCCL 2.18-2.27 prints a socket address with ncclSocketToString as `host<port>`: a numeric
address, or a resolved name where numericHostForm is 0; IPv4-mapped IPv6 as `::ffff:10.0.0.5<port>`):
  NET/IB : Got completion from peer 10.0.0.4<43210> with error 12, ...      (net_ib.cc, every release)
  socketProgress: Connection closed by remote peer node4<52170>               (socket.cc, 2.19+)
  Net : Connection closed by remote peer 10.0.0.4<52170>                      (socket.cc, older)
  Net : Call to recv from 10.0.0.4<43210> failed : Connection reset by peer   (socket.cc)
  ... remote process exited or there was a network error ... peer 10.0.0.4<43210>
  gloo: Connection closed by peer [10.0.0.4]:29500 / Read error [10.0.0.4]:29500: Connection reset by peer
  Ray: The node with node id: ... and address: 10.0.0.4 ... has been marked dead
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_IPV4 = r"(?:\d{1,3}\.){3}\d{1,3}"
_HOST = r"[A-Za-z0-9][\w.-]{0,62}"
_ENDPOINT = rf"(?:::ffff:)?(?P<peer>{_IPV4}|[0-9A-Fa-f]{{0,4}}(?::[0-9A-Fa-f]{{0,4}}){{2,7}}(?:%\w{{1,16}})?|{_HOST})"

PEERS = tuple(re.compile(p) for p in (
    rf"\bpeer {_ENDPOINT}<\d{{1,5}}>",
    rf"\bCall to (?:recv|send|connect) (?:from|to) {_ENDPOINT}<\d{{1,5}}> failed",
    rf"(?:\bby peer|\bRead error|\bWrite error) \[{_ENDPOINT}\]:\d{{1,5}}",
    rf"\bnode with node id: ?\w{{1,64}} and address: {_ENDPOINT} [^\n]{{0,120}}?\bmarked dead",
))
"""The forms that name the far end (the module docstring lists them), each with one `peer` group."""
LOCAL = (
    # Ray's worker prefix: "(RayTrainWorker pid=1234, ip=10.0.0.5) ", "(pid=1234, ip=10.0.0.5)",
    # "(raylet, ip=10.0.0.5)".
    # (behind an srun label or a time stamp too: "0: (RayTrainWorker pid=1234, ip=10.0.0.5) ...").
    re.compile(rf"(?:^|\s)\((?:[\w.:-]{{1,80}},? )?(?:pid=\d{{1,10}}, )?ip=(?P<addr>{_IPV4})[,)]"),
    re.compile(rf"\bnode_ip_address['\"]?\s?[=:]\s?['\"]?(?P<addr>{_IPV4})\b"),
    # pdsh's prefix (DeepSpeed's multi-node launcher) when the hostfile lists addresses: "192.168.0.6: ..."
    re.compile(rf"^(?P<addr>{_IPV4}): "),
)
"""Addresses of the host that printed the line (where the line ran, not what it points at)."""

_ADDRESS = re.compile(rf"^(?:{_IPV4}|[0-9A-Fa-f:]+(?:%\w+)?)$")


@dataclass(frozen=True)
class Pointed:
    """What one line points at: host names and addresses, and whether they are a peer's."""

    names: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()
    peer: bool = False


def is_address(text: str) -> bool:
    """A numeric IPv4 or IPv6 address (not a host name)."""
    return bool(_ADDRESS.match(text)) and any(c in text for c in ".:")


def pointed_at(line: str) -> Pointed:
    """The peers `line` names (Pointed.peer), else the addresses of the host that printed it (the host
    names that printed it are the catalogue's locators: scanning.py keeps them when there is no peer)."""
    names: dict[str, None] = {}
    addresses: dict[str, None] = {}
    # Words every form holds, looked for first: this runs on every line a signature matched.
    if any(word in line for word in _PEER_WORDS):
        for pattern in PEERS:
            for found in pattern.finditer(line):
                peer = found["peer"]
                (addresses if is_address(peer) else names).setdefault(peer)
    if names or addresses:
        return Pointed(tuple(names), tuple(addresses), peer=True)
    if "ip" in line or line[:1].isdigit():
        for pattern in LOCAL:
            for found in pattern.finditer(line):
                addresses.setdefault(found["addr"])
    return Pointed((), tuple(addresses))


_PEER_WORDS = ("peer", "Call to", " error [", "marked dead")


def node_of(address: str, node_addrs: Mapping[str, str]) -> str | None:
    """The Slurm node whose NodeAddr is `address` (or whose name it is), or None: unknown, or shared by
    several nodes (a test cluster's 127.0.0.1, nodes behind one NAT), which names none of them."""
    if address in node_addrs:
        return address
    wanted = address.lower()
    if wanted.startswith("::ffff:") and "." in wanted:
        wanted = wanted[len("::ffff:"):]
    owners = [node for node, addr in node_addrs.items() if addr.lower() == wanted]
    if len(owners) != 1 and not is_address(wanted):
        # A host name that is a NodeAddr's short form (NodeAddr=node4.ib.cluster, NCCL printing node4.ib).
        short = wanted.split(".", 1)[0]
        owners = [node for node, addr in node_addrs.items()
                  if not is_address(addr) and addr.lower().split(".", 1)[0] == short]
    return owners[0] if len(owners) == 1 else None


def nodes_named(names: Iterable[str], addresses: Iterable[str], node_addrs: Mapping[str, str]) -> list[str]:
    """The Slurm nodes that host names and addresses stand for: a name that is a node's stays itself, one
    that is a node's NodeAddr becomes that node, an address becomes the node with that NodeAddr; what maps
    to no single node is left out (the evidence still shows it)."""
    found: dict[str, None] = {}
    for name in names:
        found.setdefault(name if name in node_addrs or not node_addrs else (node_of(name, node_addrs) or name))
    for address in addresses:
        node = node_of(address, node_addrs)
        if node is not None:
            found.setdefault(node)
    return list(found)
