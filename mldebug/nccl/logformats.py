"""The shapes of the lines mldebug.nccl reads, as regular expressions, and the words a line
must hold to be looked at at all. Facts from NCCL's src/debug.cc, init.cc, bootstrap.cc,
misc/socket.cc, transport/net_ib.cc and include/checks.h (2.7 to 2.29) and torch's
ProcessGroupNCCL.cpp, ProcessGroupGloo.cpp and TCPStore (1.x to 2.13); torch 2.15's nccl2
backend (c10d/nccl2: Logging.hpp's "[TC][rank=R][name=PG] " head, WorkNCCL.cpp's timeout) and
torchrun's --log-line-prefix-template "${hostname}:${rank}: ".
"""

from __future__ import annotations

import re

# The words a line must hold to be looked at: few (each is one pass of `bytes.find` over
# the chunk) and chosen so the lines NCCL writes by the thousand (Channel, Trees, Ring,
# Connected, one per collective with NCCL_DEBUG_SUBSYS=COLL) hold none of them.
KEYWORDS = (
    b"NCCL WARN",
    b"ersion",  # NCCL version X, cudaDriverVersion N
    b"Using",  # Using network X, NET/IB : Using, NET/Socket : Using, Bootstrap : Using
    b"busId ",  # comm 0x.. rank R nranks N cudaDev D busId B ... - Init START / Abort
    b".cc:",  # file.cc:L -> N unwinding; gloo's errors name their .cc file
    b"ank ",  # "[Rank R]", "[PG ID 0 ... Rank R]": the watchdog's every message; barriers
    b"rror",  # NCCL error, Last error, DistStoreError (clients joined), RuntimeError
    b"[c10d]",  # the TCPStore client: failed to connect to [host]:port
    b"[TC]",  # torch 2.15's nccl2 backend heads every line of its own with it
)

ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
# Launcher prefixes, tried in a loop at the start of a line.
PREFIXES = re.compile(
    r"\[(?P<host>[A-Za-z0-9_.-]+):(?P<mrank>\d+)\] "  # mldebug run: [host:rank]
    r"|\[rank(?P<trank>\d+)\]:"  # torch: [rank3]:
    r"|\[[A-Za-z_][\w-]*?\d+\]:"  # torchrun --tee: [default0]: (a local rank: not kept)
    r"|\[\d+,(?P<orank>\d+)\]<std(?:out|err)>:"  # Open MPI --tag-output
    r"|\[(?P<hrank>\d+)\] (?!NCCL )"  # MPICH -prepend-rank: [3]
    r"|(?P<srank>\d+): "  # srun --label
    # torchrun --log-line-prefix-template "${hostname}:${rank}: " (torch 2.15's docs): a
    # host name starts with a letter; NCCL's own "host:pid:tid " has no ": " after the pid
    r"|(?P<thost>[A-Za-z][A-Za-z0-9_.-]{0,62}):(?P<tprank>\d+): "
    r"|\[\d{4}-\d\d-\d\d[T ][0-9:.,]+Z?\] "  # a timestamp: NCCL's before WARN, or a logger's
    r"|\s+"
)
# glog / c10 log heads: "[E1201 00:23:43.367818701 ProcessGroupNCCL.cpp:689] ",
# "[E ProcessGroupNCCL.cpp:587] ", "E1201 00:23:43.367 58626 ProcessGroupNCCL.cpp:869] ".
GLOG = re.compile(r"\[?[IWEF](?:\d{4} [0-9:.]+)?(?: \d+)? [\w.]+:\d+\] ")
NCCL = re.compile(
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) "
    r"(?:\[(?P<dev>-?\d+)\] )?(?:[0-9.]+ )?"
    r"(?:(?P<file>[^\s:]+):(?P<line>\d+) (?:\((?P<func>[^)]*)\) )?)?"
    r"NCCL (?P<level>INFO|WARN|TRACE|CALL|ABORT) ?(?P<msg>.*)"
)
VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)(?:[^+\s]*\+cuda(?P<cuda>\d+\.\d+))?")
DRIVER = re.compile(r"cudaDriverVersion (?P<v>\d+)")
COMM = re.compile(
    r"comm (?P<comm>0x[0-9a-fA-F]+|\(nil\)) rank (?P<rank>\d+) nranks (?P<nranks>\d+)"
    r"(?: cudaDev (?P<dev>-?\d+))?(?:.*?busId (?P<bus>[0-9a-fA-F]+))?"
    r"(?:.*?commId (?P<id>0x[0-9a-fA-F]+))?.*- (?P<what>Init|Abort) (?P<state>START|COMPLETE)",
    re.IGNORECASE,
)
NET_IB = re.compile(
    r"NET/IB ?: (?:Using(?P<devs>.*?)(?:; OOB (?P<oob>[^\s:]+)\S*)?\s*$|(?P<none>No device))"
)
NET_SOCKET = re.compile(r"NET/Socket ?: Using (?P<ifs>.*)")
IFACE = re.compile(r"\[\d+\]\s*(?P<name>[^\s:\[\]]+)")
BOOTSTRAP = re.compile(r"Bootstrap ?: Using (?:\[\d+\])?(?P<if>[^\s:<]+)")
USING_NET = re.compile(r"Using network (?P<net>.+)")
UNWIND = re.compile(r"(?P<file>[\w./-]+\.cc):(?P<line>\d+) -> (?P<code>\d+)")
PG = re.compile(
    r"\[PG (?:ID )?(?P<pg>\d+)(?: PG GUID (?P<guid>[^\s\]]+))? Rank (?P<rank>\d+)\]"
    r"|\[Rank (?P<rank2>\d+)\]"
)
# torch 2.15's nccl2 (c10d/nccl2/Logging.hpp): "[TC][rank=3][name=0] ", the communicator's
# rank and its process group's name; a timed-out work says so in WorkNCCL.cpp, and its
# exception is "Watchdog caught collective operation timeout: NCCL operation timed out".
TC = re.compile(r"\[TC\](?:\[rank=(?P<rank>\d+)\])?(?:\[name=(?P<pg>[^\]]{0,64})\])?")
TC_TIMED_OUT = re.compile(r"Operation timed out after (?P<ms>\d+) ms")
NCCL2_TIMEOUT = "Watchdog caught collective operation timeout: NCCL operation timed out"
WORK = re.compile(r"WorkNCCL\((?P<fields>(?:[^()]|\(ms\))*)\)")
FIELD = re.compile(r"(\w+(?:\(ms\))?)=([^,]*)")
RAN_FOR = re.compile(r"ran for (\d+) (?:milliseconds|ms)")
LAST = re.compile(
    r"[Ll]ast enqueued (?:NCCL )?work: (?P<enq>-?\d+), last completed (?:NCCL )?work: (?P<done>-?\d+)"
)
FAILED_AT = re.compile(
    r"(?:Timeout at NCCL work|detected by watchdog at work|at work sequence id):? (?P<seq>-?\d+)"
)
DUMP_FROM = re.compile(
    r"dump signal due to a collective timeout from\s+(?:rank (?P<rank>\d+)|this)"
)
STUCK = re.compile(r"watchdog got stuck for (?P<s>\d+) seconds|Heartbeat monitor timed out")
GLOO_TIMEOUT = re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?P<op>recv|send) operation")
CLOSED = re.compile(
    r"Connection (?P<how>closed|reset) by peer(?: \[(?P<host>[^\]]+)\]:(?P<port>\d+))?"
)
CONNECT_TO = re.compile(
    r"[Cc]onnect(?: to)? (?:to )?(?:\[(?P<h1>[^\]]+)\]:(?P<p1>\d+)|(?P<h2>[0-9A-Za-z_.:-]+?)<(?P<p2>\d+)>"
    r"|\((?P<h3>[^,()]+), (?P<p3>\d+)\))"
)
ENFORCE = re.compile(r"enforce fail at (?P<where>[^\]]+)\] (?P<what>.*)")
BARRIER = re.compile(
    r"Ranks? (?P<ranks>\d+(?:, ?\d+)*) failed to pass monitoredBarrier(?: in (?P<ms>\d+) ms)?"
)
CLIENTS = re.compile(
    r"Timed out after (?P<s>\d+) seconds waiting for clients\. (?P<got>\d+)/(?P<want>\d+) clients joined"
)
NCCL_ERROR = re.compile(
    r"NCCL error(?: in: \S+)?[:,]? (?P<what>[^,]*)(?:.*NCCL version (?P<v>[\d.]+))?"
)
PATH_RANK = re.compile(r"(?:^|[^a-z])rank[_.-]?(?P<rank>\d+)(?:$|[^0-9])", re.IGNORECASE)


def prefixes(text: str) -> tuple[str | None, int | None, int]:
    """The host and rank launcher prefixes at the start of a line name, and where the
    line's own text starts."""
    host, rank, pos = None, None, 0
    while True:
        match = PREFIXES.match(text, pos)
        if not match or match.end() == pos:
            return host, rank, pos
        groups = match.groupdict()
        for name in ("mrank", "trank", "orank", "hrank", "srank", "tprank"):
            if groups[name] is not None:
                rank = int(groups[name]) if len(groups[name]) < 8 else None
        host = groups["host"] or groups["thost"] or host
        pos = match.end()
