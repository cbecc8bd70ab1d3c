"""Which network interface gloo and NCCL chose, and why that fails.

gloo: "Unable to find address for: X" (GLOO_SOCKET_IFNAME names no interface of this
host, or holds NCCL's `^lo,docker` list or an IP address, neither of which gloo takes);
"connectFullMesh failed ... local=[127.0.0.1]" (the host name resolves to loopback).
NCCL: `Bootstrap : Using` / `NET/Socket : Using` lists (wrapped one interface per line too)
holding docker bridges, veth pairs, loopback, tunnels or link-local IPv6;
`NCCL_SOCKET_IFNAME set to X` where X is in no list; `NET/IB : No device found` where
InfiniBand was asked for. Formats from gloo's tcp/device.cc and pair.cc, NCCL's
misc/socket.cc, bootstrap.cc and transport/net_ib.cc.
"""

from __future__ import annotations

import re

from mldebug.explain.finding import (
    KIND_GLOO_INTERFACE,
    KIND_NCCL_INTERFACE,
    KIND_NO_IB,
    Explained,
)
from mldebug.explain.text import Line
from mldebug.model import SEVERITY_WARNING

RECIPE_IFACE = "network-interface"
RECIPE_IB = "nccl-sockets-instead-of-ib"

_NO_ADDRESS = re.compile(r"Unable to find address for:?\s*(?P<what>\S*)")
_MESH = re.compile(r"connectFullMesh failed")
_LOCAL = re.compile(r"local=\[(?P<addr>[^\]]+)\]")
_REMOTE = re.compile(r"remote=\[(?P<addr>[^\]]+)\]")
_USING = re.compile(r"(?:Bootstrap|NET/Socket|NET) ?: ?Using(?: interface)?")
_IFACE = re.compile(r"(?:\[\d+\]\s*)?(?P<name>[A-Za-z][\w.@-]*):(?P<addr>[0-9a-fA-F:.%\w]+?)<\d+>")
_SET_TO = re.compile(r"NCCL_SOCKET_IFNAME set (?:by environment )?to (?P<value>\S+)")
_GLOO_SET = re.compile(r"GLOO_SOCKET_IFNAME=(?P<value>\S+)")
_FAILED = re.compile(
    r"timed out|Timeout|timeout|refused|closed by|reset by|Error|error|WARN|failed|hang",
)
# NCCL's words for a bootstrap that found no interface to use
_NO_INTERFACE = ("no socket interface", "neither AF_INET", "No usable listening interface")
BAD_PREFIXES = ("docker", "br-", "veth", "virbr", "cni", "flannel", "cali", "tunl", "ip6tnl")
MANY = 4  # interfaces in one list: NCCL spreads its sockets over all of them


def _is_ip(text: str) -> bool:
    return bool(re.fullmatch(r"[0-9.]+|[0-9a-fA-F:]+", text)) and any(c in text for c in ".:")


def _at_line(
    line: Line,
    kind: str,
    summary: str,
    confidence: float,
    fix: str,
    cited: list[Line] | None = None,
) -> Explained:
    """An interface finding of the rank `line` is from, resting on `cited` (the line itself
    unless told)."""
    found = Explained(kind, summary, confidence, RECIPE_IFACE, fix=fix, ranks=line.ranks)
    return found.cited(cited if cited is not None else [line])


def _gloo(lines: list[Line]) -> list[Explained]:
    found = []
    for line in lines:
        text = line.text
        missing = _NO_ADDRESS.search(text) if "Unable to find address" in text else None
        if missing:
            what = missing.group("what").rstrip(".,)'\"")
            if what.startswith("^") or "," in what:
                why = (
                    f"GLOO_SOCKET_IFNAME holds NCCL's list syntax ({what!r}): gloo takes one "
                    "interface name (or several joined by commas since torch 1.12), never '^'"
                )
                fix = (
                    "set GLOO_SOCKET_IFNAME to the one interface that reaches MASTER_ADDR "
                    "(`ip -4 route get MASTER_ADDR` names it); keep the ^ list in "
                    "NCCL_SOCKET_IFNAME"
                )
            elif _is_ip(what):
                why = (
                    f"GLOO_SOCKET_IFNAME (or NCCL_SOCKET_IFNAME) holds an address ({what}), "
                    "not an interface name"
                )
                fix = "give the interface's name (eth0, ens5, ib0), as `ip -br addr` lists it"
            else:
                why = (
                    f"gloo was told to use interface {what or '(empty)'!r}, which this host "
                    "does not have (names differ between nodes: eth0 here, ens5 there)"
                )
                fix = (
                    "set GLOO_SOCKET_IFNAME per node to an interface `ip -br addr` shows, or "
                    "leave it unset so gloo uses the address the host name resolves to"
                )
            found.append(
                _at_line(
                    line,
                    KIND_GLOO_INTERFACE,
                    f"gloo could not bind: {why}",
                    0.95,
                    fix,
                )
            )
        elif _MESH.search(text):
            local = _LOCAL.search(text)
            remote = _REMOTE.search(text)
            loop = [
                m.group("addr") for m in (local, remote) if m and m.group("addr").startswith("127.")
            ]
            if loop:
                found.append(
                    _at_line(
                        line,
                        KIND_GLOO_INTERFACE,
                        f"gloo bound a loopback address ({loop[0]}) and told the other ranks to "
                        "connect there: this host's name resolves to 127.0.x.x (/etc/hosts, "
                        "host networking in a container), so no other node can reach it",
                        0.93,
                        "set GLOO_SOCKET_IFNAME to the interface that reaches the other "
                        "nodes, or make the host name resolve to that interface's address",
                    )
                )
            else:
                found.append(
                    _at_line(
                        line,
                        KIND_GLOO_INTERFACE,
                        "gloo could not connect all ranks to each other (connectFullMesh "
                        "failed): the address a rank advertised is not reachable from the "
                        "others (wrong interface, a firewall, a rank that exited)",
                        0.7,
                        "check which address each rank binds (GLOO_SOCKET_IFNAME) and that "
                        "the ports between nodes are open",
                    )
                )
    return found[:4]


def _lists(lines: list[Line]) -> list[tuple[list[Line], list[tuple[str, str]]]]:
    """Each `Using` list with its interfaces; a list wrapped one interface per line is
    read on across the lines that follow."""
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        using = _USING.search(line.text) if "Using" in line.text else None
        if using and ("NCCL" in line.text or "Bootstrap" in line.text or "NET/" in line.text):
            rest = line.text[using.end() :]
            ifaces = [(m.group("name"), m.group("addr")) for m in _IFACE.finditer(rest)]
            group = [line]
            j = i + 1
            while j < len(lines) and j - i < 64:
                nxt = lines[j].text.strip()
                cont = re.fullmatch(
                    r"(?:\[\d+\]\s*)?[A-Za-z][\w.@-]*:[0-9a-fA-F:.%\w]+?<\d+>\s*;?", nxt
                )
                if not cont or lines[j].source != line.source:
                    break
                ifaces += [(m.group("name"), m.group("addr")) for m in _IFACE.finditer(nxt)]
                group.append(lines[j])
                j += 1
            if ifaces:
                out.append((group, ifaces))
            i = j
            continue
        i += 1
    return out


def _bad(name: str, addr: str) -> str | None:
    if name == "lo" or addr.startswith("127."):
        return f"{name} (loopback)"
    if name.startswith(BAD_PREFIXES):
        return f"{name} (a container bridge or tunnel)"
    if addr.startswith("169.254."):
        return f"{name} {addr} (link-local IPv4)"
    if addr.lower().startswith("fe80"):
        return f"{name} {addr.split('%')[0]} (link-local IPv6)"
    return None


def _nccl(lines: list[Line]) -> list[Explained]:
    found = []
    lists = _lists(lines)
    failed = next(
        (line for line in lines if "Using" not in line.text and _FAILED.search(line.text)), None
    )
    failing = failed is not None
    evidence = [failed] if failed is not None else []
    asked = [
        (line, _SET_TO.search(line.text)) for line in lines if "SOCKET_IFNAME set" in line.text
    ]
    asked_found = [(line, m) for line, m in asked if m is not None]
    named = {name for _, ifaces in lists for name, _ in ifaces}
    bad: dict[str, list[Line]] = {}
    many: list[Line] = []
    for group, ifaces in lists:
        for name, addr in ifaces:
            why = _bad(name, addr)
            if why:
                bad.setdefault(why, []).extend(group)
        if len({name for name, _ in ifaces}) >= MANY:
            many.extend(group)
    for line, match in asked_found[:1]:
        value = match.group("value").strip("'\"")
        wanted = [v for v in value.lstrip("^=").split(",") if v]
        if value.startswith("^") or not wanted:
            continue
        exact = value.startswith("=")
        used = [n for n in named for w in wanted if (n == w if exact else n.startswith(w))]
        if lists and not used:
            found.append(
                _at_line(
                    line,
                    KIND_NCCL_INTERFACE,
                    f"NCCL_SOCKET_IFNAME is set to {value} but NCCL used "
                    f"{', '.join(sorted(named)[:6])}: no interface of that name exists on "
                    "this host, so NCCL fell back or failed",
                    0.9,
                    "name an interface that exists on every node (`ip -br addr`), a common "
                    "prefix (NCCL_SOCKET_IFNAME=en), or a per-node value in /etc/nccl.conf",
                    cited=[line] + [g for group, _ in lists for g in group],
                )
            )
        elif not lists and any(w in other.text for w in _NO_INTERFACE for other in lines):
            culprit = next(l2 for l2 in lines if any(w in l2.text for w in _NO_INTERFACE))
            found.append(
                _at_line(
                    line,
                    KIND_NCCL_INTERFACE,
                    f"NCCL_SOCKET_IFNAME is set to {value} and NCCL found no such interface: "
                    "the bootstrap had no address to use",
                    0.9,
                    "name an interface that exists on every node (`ip -br addr`), or a "
                    "common prefix; unset it to let NCCL choose",
                    cited=[line, culprit],
                )
            )
    if bad and failing and not (asked_found and found):  # a working job: never cry wolf
        whys = sorted(bad)
        cited = [line for why in whys for line in bad[why]] + evidence
        found.append(
            Explained(
                KIND_NCCL_INTERFACE,
                f"NCCL uses {', '.join(whys[:4])}"
                + (" among its interfaces" if len(named) > 1 else "")
                + ": other nodes cannot reach a rank over it, so bootstrap or the first "
                "collective hangs or fails",
                0.82 if failing else 0.5,
                RECIPE_IFACE,
                fix="set NCCL_SOCKET_IFNAME to the interface between the nodes (=eth0, or ens "
                "for every ens*), or exclude the others: NCCL_SOCKET_IFNAME=^lo,docker,veth",
                severity="error" if failing else SEVERITY_WARNING,
                note="" if failing else "nothing in the paste failed: on one node this is harmless",
            ).cited(cited)
        )
    elif many and failing and not found:
        found.append(
            Explained(
                KIND_NCCL_INTERFACE,
                f"NCCL spreads its sockets over {len(named)} interfaces "
                f"({', '.join(sorted(named)[:6])}): some may not reach the other nodes",
                0.6 if failing else 0.3,
                RECIPE_IFACE,
                fix="set NCCL_SOCKET_IFNAME to the one interface between the nodes",
                severity="error" if failing else SEVERITY_WARNING,
            ).cited(many + evidence)
        )
    return found


def _no_ib(lines: list[Line]) -> list[Explained]:
    none = [line for line in lines if "NET/IB" in line.text and "No device found" in line.text]
    if not none:
        return []
    wanted = [
        line
        for line in lines
        if re.search(
            r"NCCL_IB_HCA|NCCL_NET set by environment to IB|NCCL_IB_DISABLE set by environment to 0",
            line.text,
        )
        or "Failed to initialize any NET plugin" in line.text
        or "NCCL_NET_PLUGIN" in line.text
    ]
    by_host: dict[str, Line] = {}
    for line in lines:
        if " NCCL INFO " in line.text:
            by_host.setdefault(line.text.split(":", 1)[0], line)
    hosts = set(by_host)
    if not wanted and len(hosts) < 2:
        return []
    failed = next(
        (line for line in lines if "Failed to initialize any NET plugin" in line.text), None
    )
    return [
        Explained(
            KIND_NO_IB,
            "NCCL found no InfiniBand/RoCE device (NET/IB : No device found)"
            + (" although it was asked to use IB" if wanted else f" on a job of {len(hosts)} hosts")
            + ": "
            + ("no network plugin could start" if failed else "it falls back to TCP sockets")
            + "; the verbs stack or the device is not visible here (container without "
            "/dev/infiniband, rdma-core missing, wrong NCCL_IB_HCA)",
            0.8 if wanted else 0.55,
            RECIPE_IB,
            fix="check `ibv_devinfo` on the node (in the container: --device=/dev/infiniband, "
            "--cap-add=IPC_LOCK); NCCL_IB_HCA must name a device it lists",
            # Asked for and missing is an error; sockets between hosts may be by design (slow).
            severity="error" if (wanted or failed) else SEVERITY_WARNING,
        ).cited(none[:1] + wanted[:2] + ([] if wanted else list(by_host.values())[:2]))
    ]


def read(lines: list[Line]) -> list[Explained]:
    return _gloo(lines) + _nccl(lines) + _no_ib(lines)
