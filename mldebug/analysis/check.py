"""`mldebug check`'s verdict: who could not join, which device and which link is slow.

Pure functions over a `CheckResults` (model/check.py). Bandwidths are nccl-tests' (its
doc/PERFORMANCE.md): algbw = S / t for a buffer of S bytes; busbw = algbw * 2(n-1)/n for
all_reduce, algbw * (n-1)/n for all_gather and reduce_scatter (S the whole buffer), algbw
for a send/recv exchange between two ranks.

Never cry wolf: ranks that share a loaded machine measure with noise. A rank or a link is
slow only when it is below SLOW_RATIO of the median AND either far outside the spread of the
others (ROBUST_Z scaled median absolute deviations) or below SLOW_RATIO of every other (a few
others can spread wide on a loaded machine, and a rank at a twentieth of the slowest of them
is still slow), with at least MIN_COMPARED to compare; each figure is already the best of
repeated measurements (preflight/rank.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from mldebug.analysis.judge import Evidence, judge
from mldebug.model import (
    KIND_CHECK_OK,
    KIND_CONNECTION,
    KIND_MISSING,
    KIND_SLOW_DEVICE,
    KIND_SLOW_LINK,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    Finding,
    FindingPart,
)
from mldebug.model.check import (
    Bandwidth,
    CheckRank,
    CheckResults,
    CheckVerdict,
    CollectiveTime,
    DeviceRate,
    LinkRate,
)
from mldebug.wording import ranks_text, verb

K = TypeVar("K")

SLOW_RATIO = 0.6  # below 0.6x the median: slow (GPUs, NCCL links: each rank's own device)
# CPU ranks share cores with each other and with whatever else runs: on a loaded 2-core
# machine a healthy rank's best matmul batch was seen at 0.51x the median, a loopback pair
# at 0.54x (docs/check.md); a rank held to a fiftieth of a core by a CPU quota at 0.03-0.14x.
CPU_SLOW_RATIO = 0.35
ROBUST_Z = 3.0  # and more than 3 scaled MADs of the others below their median
MAD_SCALE = 1.4826  # a MAD times this estimates a normal spread's standard deviation
MIN_COMPARED = 3  # fewer figures have no median worth the name

BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
}

# A connection error's likely cause, by what it says: (words, cause, recipe).
CAUSES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (
        ("connection refused", "econnrefused", "errno 111"),
        "nothing listens at the rendezvous port: this rank's MASTER_PORT differs from rank "
        "0's, or rank 0 never opened it",
        "connection-refused",
    ),
    (
        ("name or service not known", "getaddrinfo", "nodename nor servname", "unknown host"),
        "the rendezvous address does not resolve here: check MASTER_ADDR on this node",
        "rendezvous-hang",
    ),
    (
        ("no route to host", "network is unreachable", "ehostunreach", "enetunreach"),
        "no route to the rendezvous address from this node: the interface or the route",
        "network-interface",
    ),
    (
        ("ncclsysterror", "ncclinternalerror", "nccl error", "ncclremoteerror", "nccl_"),
        "NCCL could not connect the ranks: its transport or interface (NCCL_SOCKET_IFNAME, "
        "NCCL_IB_HCA); run with NCCL_DEBUG=INFO",
        "nccl-init-failure",
    ),
    (
        ("gloo", "connectfullmesh", "connection reset", "connection closed", "broken pipe"),
        "the ranks reached the rendezvous but not each other: the interface they advertise "
        "(GLOO_SOCKET_IFNAME) or a firewall between nodes",
        "network-interface",
    ),
    (
        ("joined the rendezvous after",),
        "it started after the others stopped waiting: a slow start (imports, a busy node)",
        "rendezvous-hang",
    ),
    (
        ("timed out", "timeout", "timedout", "deadline"),
        "the rendezvous address did not answer in time: a wrong MASTER_ADDR, a firewall, or "
        "rank 0 not started",
        "rendezvous-hang",
    ),
)


def bandwidth_of(timing: CollectiveTime) -> Bandwidth:
    """nccl-tests' algbw and busbw (GB/s) of one op."""
    algbw = timing.bytes / timing.seconds / 1e9
    factor = BUS_FACTORS.get(timing.op, lambda n: 1.0)(max(1, timing.ranks))
    return Bandwidth(timing.op, timing.bytes, timing.seconds, timing.ranks, algbw, algbw * factor)


def low_outliers(values: Mapping[K, float], ratio: float = SLOW_RATIO) -> dict[K, float]:
    """key -> ratio to the median, for the figures below `ratio` of the median of all that
    are also further below the median of the others than ROBUST_Z times the others' spread
    (their MAD, scaled; the figure itself left out, so that one slow figure among few does not
    widen the spread it is judged by), or below `ratio` of the lowest of the others."""
    if len(values) < MIN_COMPARED:
        return {}
    median = statistics.median(values.values())
    if median <= 0:
        return {}
    slow = {}
    for key, value in values.items():
        if value >= ratio * median:
            continue
        others = [v for k, v in values.items() if k != key]
        middle = statistics.median(others)
        spread = MAD_SCALE * statistics.median(abs(v - middle) for v in others)
        if middle - value > ROBUST_Z * spread or value < ratio * min(others):
            slow[key] = value / median
    return slow


def cause_of(error: str | None, step: str | None) -> tuple[str, str]:
    """The likely cause of a rank's failure to join, and the recipe that says more."""
    text = (error or "").lower()
    for words, cause, recipe in CAUSES:
        if any(word in text for word in words):
            return cause, recipe
    if step in ("rendezvous", "membership"):
        return "it could not reach the rendezvous store", "rendezvous-hang"
    return "the group formed but a collective failed", "network-interface"


def _where(rank: CheckRank) -> str:
    return f" on {rank.host}" if rank.host else ""


def _other_address(rank: CheckRank, results: CheckResults) -> str | None:
    """Where `rank` was told the rendezvous is, against where the ranks that joined were:
    a different address or port is the cause itself."""
    joined = [r for r in results.ranks if r.joined and r.master]
    masters = {r.master for r in joined}
    if not rank.master or len(masters) != 1 or rank.master in masters:
        return None
    (common,) = masters
    return (
        f"it was given the rendezvous {rank.master}, {ranks_text(r.rank for r in joined)} "
        f"{verb([r.rank for r in joined], 'was', 'were')} given {common}: a wrong MASTER_ADDR or MASTER_PORT "
        "on this rank"
    )


def _unjoined(results: CheckResults) -> list[Finding]:
    findings = []
    for rank in results.ranks:
        if rank.joined is not False:
            continue
        cause, recipe = cause_of(rank.error, rank.failed_step)
        other = _other_address(rank, results) if rank.failed_step == "rendezvous" else None
        if other:
            cause = other
        at = f" {rank.master}" if rank.master and rank.failed_step == "rendezvous" else ""
        summary = (
            f"rank {rank.rank}{_where(rank)} could not join the check's group "
            f"({rank.failed_step or 'connect'}{at}): {cause}"
        )
        said = rank.error or (rank.said[-1] if rank.said else "")
        findings.append(
            Finding(
                KIND_CONNECTION,
                (rank.rank,),
                summary,
                recipe=recipe,
                detail=f"it printed: {said}" if said else "",
                severity=SEVERITY_ERROR,
            )
        )
    return findings


def _silent(results: CheckResults) -> list[Finding]:
    """Ranks that never started the check, or ended (or were stopped) before its end."""
    if not results.ranks:
        said = results.launcher_said[-1] if results.launcher_said else ""
        return [
            Finding(
                KIND_MISSING,
                (),
                "no rank printed a check result: the command did not start "
                "`python -m mldebug.preflight.rank` on any rank, or it ended at once",
                recipe="missing-ranks",
                detail=f"the launcher printed: {said}" if said else "the launcher printed nothing",
            )
        ]
    findings = []
    never = [r for r in results.ranks if not r.started]
    unfinished = [
        r for r in results.ranks if r.started and not r.finished and r.joined is not False
    ]
    limit = " (the check's time limit stopped it)" if results.time_limit_hit else ""
    if never:
        ranks = [r.rank for r in never]
        said = next((r.said[-1] for r in never if r.said), "")
        hosts = sorted({r.host for r in never if r.host})
        where = f" on {', '.join(hosts[:4])}" if hosts else ""
        findings.append(
            Finding(
                KIND_MISSING,
                tuple(ranks),
                f"{ranks_text(ranks)}{where} never started the check{limit}",
                recipe="missing-ranks",
                detail=f"it printed: {said}" if said else "it printed nothing",
            )
        )
    if unfinished:
        ranks = [r.rank for r in unfinished]
        said = next((r.said[-1] for r in unfinished if r.said), "")
        phases = sorted({r.last_phase or "start" for r in unfinished})
        detail = f"the last record it printed: {', '.join(phases)}"
        if results.time_limit_hit:
            detail += "; a longer --time-limit gives it more time"
        findings.append(
            Finding(
                KIND_MISSING,
                tuple(ranks),
                f"{ranks_text(ranks)} did not finish the check{limit}",
                # stopped by the limit: stuck somewhere (or slow); else it ended by itself
                recipe="stuck-rank" if results.time_limit_hit else "rank-crash",
                detail=detail + (f"; it printed: {said}" if said else ""),
            )
        )
    return findings


def compared_rates(results: CheckResults) -> dict[str, dict[int, float]]:
    """dtype -> rank -> TFLOPS of the ranks measured together: those that joined the group
    computed in one window after its barrier; a rank that could not join computed alone, at
    another time, beside other load (where no rank joined, all are compared)."""
    together = any(r.joined for r in results.ranks)
    by_dtype: dict[str, dict[int, float]] = {}
    for rank in results.ranks:
        if together and not rank.joined:
            continue
        for rate in rank.compute:
            by_dtype.setdefault(rate.dtype, {})[rank.rank] = rate.tflops
    return by_dtype


def device_rates(results: CheckResults) -> tuple[list[DeviceRate], dict[str, float]]:
    """Each rank's best rate per dtype beside the median of the ranks measured together."""
    compared = compared_rates(results)
    medians = {dtype: statistics.median(values.values()) for dtype, values in compared.items()}
    rates = []
    for rank in results.ranks:
        for rate in rank.compute:
            values, median = compared.get(rate.dtype, {}), medians.get(rate.dtype, 0.0)
            usable = rank.rank in values and len(values) >= MIN_COMPARED and median > 0
            ratio = rate.tflops / median if usable else None
            rates.append(DeviceRate(rank.rank, rank.host, rate.dtype, rate.tflops, ratio))
    return rates, medians


def _rate_text(tflops: float) -> str:
    return f"{tflops:.3g} TFLOPS" if tflops >= 1 else f"{tflops * 1000:.3g} GFLOPS"


def _slow_devices(results: CheckResults, medians: dict[str, float]) -> list[Finding]:
    slow: dict[int, tuple[str, float, float]] = {}  # rank -> the dtype it is slowest in
    limit = slow_ratio(results)
    for dtype, values in compared_rates(results).items():
        for rank, ratio in low_outliers(values, limit).items():
            if rank not in slow or ratio < slow[rank][2]:
                slow[rank] = (dtype, values[rank], ratio)
    hosts = {r.rank: r for r in results.ranks}
    gpu = any(r.gpu for r in results.ranks)
    findings = []
    for rank, (dtype, tflops, ratio) in sorted(slow.items(), key=lambda kv: kv[1][2]):
        what = "matmul TFLOPS" if tflops >= 1 else "matmul GFLOPS"
        check = (
            "check its clocks and thermals (`nvidia-smi -q -d PERFORMANCE`: a slowdown reason "
            "active), ECC errors and Xid lines (`nvidia-smi -q -d ECC`, dmesg), and its PCIe link"
            if gpu
            else "check what else runs on its cores (top, its cgroup's cpu.max or CPU quota, "
            "taskset), its CPU frequency and thermals"
        )
        findings.append(
            Finding(
                KIND_SLOW_DEVICE,
                (rank,),
                f"rank {rank}{_where(hosts[rank])} reaches {ratio:.2f}x the median {what} "
                f"in {dtype} ({_rate_text(tflops)}, the median rank {_rate_text(medians[dtype])})",
                recipe="slow-device",
                detail=f"what to check next: {check}",
                severity=SEVERITY_WARNING,
            )
        )
    return findings


def slow_ratio(results: CheckResults) -> float:
    """SLOW_RATIO where the ranks have GPUs, CPU_SLOW_RATIO where they share CPUs."""
    return SLOW_RATIO if any(r.gpu for r in results.ranks) else CPU_SLOW_RATIO


def link_rates(results: CheckResults) -> list[LinkRate]:
    """Each host pair's bus bandwidth (the slower end's figure) beside the median pair's."""
    pairs: dict[tuple[str, str], tuple[tuple[int, int], float]] = {}
    for pair in results.pairs:
        busbw = pair.bytes / pair.seconds / 1e9
        known = pairs.get(pair.hosts)
        if known is None or busbw < known[1]:
            pairs[pair.hosts] = (pair.ranks, busbw)
    slow = low_outliers({hosts: bw for hosts, (_, bw) in pairs.items()}, slow_ratio(results))
    median = statistics.median(bw for _, bw in pairs.values()) if pairs else 0.0
    compared = len(pairs) >= MIN_COMPARED and median > 0
    return [
        LinkRate(hosts, ranks, bw, slow.get(hosts, bw / median) if compared else None)
        for hosts, (ranks, bw) in sorted(pairs.items())
    ]


def _slow_links(links: Sequence[LinkRate], limit: float) -> list[Finding]:
    slow = low_outliers({link.hosts: link.busbw for link in links}, limit)
    if not slow:
        return []
    median = statistics.median(link.busbw for link in links)
    findings = []
    # A host in every slow pair is the likely culprit: its NIC, cable or switch port.
    counts: dict[str, int] = {}
    for pair in slow:
        for host in pair:
            counts[host] = counts.get(host, 0) + 1
    for link in sorted((x for x in links if x.hosts in slow), key=lambda x: x.busbw):
        a, b = link.hosts
        if counts[b] > counts[a]:
            a, b = b, a
        findings.append(
            Finding(
                KIND_SLOW_LINK,
                link.ranks,
                f"node {a}'s link to {b} reaches {link.busbw:.3g} GB/s bus bandwidth, the "
                f"median pair {median:.3g} GB/s ({slow[link.hosts]:.2f}x)",
                recipe="slow-link",
                detail=(
                    f"measured between rank {link.ranks[0]} and rank {link.ranks[1]} "
                    "(each node's first rank); check the NICs, cables and switch ports of "
                    "these nodes, and that NCCL uses the same transport on both "
                    "(NCCL_DEBUG=INFO: NET/IB, not NET/Socket)"
                ),
                severity=SEVERITY_WARNING,
                parts=(
                    FindingPart((link.ranks[0],), a),
                    FindingPart((link.ranks[1],), b),
                ),
            )
        )
    return findings


def _healthy(results: CheckResults, bandwidth: Sequence[Bandwidth], medians) -> Finding:
    ranks = [r.rank for r in results.ranks if r.finished]
    parts = [f"{len(ranks)} of {len(results.ranks)} ranks finished the check"]
    for dtype, median in sorted(medians.items()):
        parts.append(f"median matmul {_rate_text(median)} in {dtype}")
    largest = max(
        (b for b in bandwidth if b.op == "all_reduce"), key=lambda b: b.bytes, default=None
    )
    if largest is not None:
        parts.append(f"all_reduce bus bandwidth {largest.busbw:.3g} GB/s at the largest size")
    return Finding(
        KIND_CHECK_OK,
        tuple(ranks),
        "no outlier: " + "; ".join(parts),
        recipe="slow-device",
        severity=SEVERITY_INFO,
    )


def check_verdict(results: CheckResults, more: Iterable[Finding] = ()) -> CheckVerdict:
    """The whole verdict of one check: failures first, then the slow devices and links,
    with `more` (what the ranks' NCCL logs say) judged in the same order."""
    bandwidth = [bandwidth_of(t) for t in results.collectives]
    devices, medians = device_rates(results)
    links = link_rates(results)
    findings = _unjoined(results) + _silent(results)
    findings += _slow_devices(results, medians) + _slow_links(links, slow_ratio(results))
    findings += list(more)
    if not any(f.severity != SEVERITY_INFO for f in findings):
        findings.append(_healthy(results, bandwidth, medians))
    return CheckVerdict(
        results,
        judge(Evidence(found=tuple(findings))),  # the one judge: merged and ordered as dump's
        tuple(bandwidth),
        tuple(links),
        tuple(devices),
        medians,
    )
