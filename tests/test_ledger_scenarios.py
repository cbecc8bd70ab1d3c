"""One scenario table, every source of collective counts, one verdict in the same words.

Each scenario says what each rank called on a group; each source's input is built in its
real format from it:
- agent: state.json written by the agent's own writer (tests/testkit/agent_writer.py: its Tracer's
  Group/Call records and its Heartbeat, through rundir's atomic writer), read back by
  collect/agentstate.py,
  judged live (analysis/sequence.py) and at exit (analysis/exit_waits.py);
- flight: torch's Flight Recorder dump in its pickle format (the fields torch 2.13 writes,
  as in the recorded dumps of tests/data/flight), read by flight/read.py;
- watchdog: ProcessGroupNCCL's lines in torch's wording (as in tests/data/nccl/watchdog_2.4),
  for the scenarios a watchdog can tell (who enqueued how far);
- ras: launch counts per op type as NCCL's RAS reports them (assembled from the documented
  `ncclras` output: per communicator, per rank, collective operations launched).
No call sites are recorded, so every source's sentence is word for word the same.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import pytest
from testkit.agent_writer import Made, write_state
from testkit.ras_fake import nccl_json

import mldebug.ledger.compare as ledger
from mldebug.analysis.exit_waits import explain
from mldebug.analysis.sequence import sequence_verdict
from mldebug.collect.agentstate import read_state
from mldebug.files import rundir, safeio
from mldebug.flight import compare_flight_dumps, read_flight_dump
from mldebug.ledger.verdicts import OUTCOMES, VERDICT_BEHIND, VERDICT_HANG, VERDICT_MISMATCH
from mldebug.model import STATE_RUNNING, RankView
from mldebug.nccl.scan import scan_paths
from mldebug.ras.read import read_ras_file
from mldebug.ras.verdict import ras_findings

NOW = 1_700_000_000.0


@dataclass(frozen=True)
class Scenario:
    name: str
    calls: dict[int, list[tuple[str, int]]]  # rank -> [(op, elements)] on `group`, in order
    verdict: str  # the sentence every source says
    group: str = "default_pg"
    world: int = 3
    sources: tuple[str, ...] = ("agent", "exit", "flight", "watchdog", "ras")


AR = ("all_reduce", 4)
SCENARIOS = [
    Scenario(
        "rank behind",
        {0: [AR] * 3, 1: [AR] * 3, 2: [AR] * 2},
        "rank 2 never called all_reduce #3",
    ),
    Scenario(
        "rank several calls behind",
        {0: [AR] * 5, 1: [AR] * 5, 2: [AR] * 2},
        # the watchdog does not say which op the last was: the words stop before it
        "rank 2 never called all_reduce #5: 3 calls behind, its last was ",
    ),
    Scenario(
        "op mismatch",
        {0: [AR] * 3, 1: [AR] * 3, 2: [AR] * 2 + [("broadcast", 4)]},
        "ranks make different collectives as call #3, which never match: ranks 0-1 call "
        "all_reduce; rank 2 calls broadcast: rank 2 is the odd one out",
        sources=("agent", "exit", "flight"),
    ),
    Scenario(
        "rank 0 is the culprit",
        {0: [AR] * 2 + [("all_reduce", 5)], 1: [AR] * 3, 2: [AR] * 3},
        "ranks make different tensors as call #3, which never match: ranks 1-2 call "
        "all_reduce of float32[4]; rank 0 calls all_reduce of float32[5]: rank 0 is the odd "
        "one out",
        sources=("agent", "flight"),
    ),
    Scenario(
        "all in #M",
        {0: [AR] * 3, 1: [AR] * 3, 2: [AR] * 3},
        "all 3 ranks made all_reduce #3 and none has seen it complete, and none is behind: "
        "the collective itself does not complete",
        sources=("agent", "exit", "flight", "watchdog"),
    ),
    Scenario(
        "subgroup member that never called",
        {0: [AR] * 2, 1: [AR] * 2},
        "rank 2 never called all_reduce #2 on group ranks:0-2: it has made no call on it yet",
        group="ranks:0-2",
        world=4,
        sources=("agent", "exit"),
    ),
]
LOOP = Scenario(
    "loop ran once more",
    {0: [AR] * 4, 1: [AR] * 3 + [("barrier", 0)]},
    "ranks make different collectives as call #4, which never match: rank 0 calls "
    "all_reduce (train.py:9); rank 1 calls barrier (train.py:12): rank 0 made one all_reduce "
    "more than the others (a loop ran once more)",
    world=2,
    sources=("agent", "exit"),
)


# ---- the agent's own writer ----------------------------------------------------------------


def agent_states(
    tmp_path: Path, scenario: Scenario, sites: dict[str, str] | None = None, pending: bool = True
):
    """Each rank's state.json, written by the agent's own writer (tests/testkit/agent_writer.py);
    the last call of each rank pending (made 1 s apart, the last 20 s before the state)."""
    paths = rundir.RunPaths(safeio.make_private_dir(tmp_path / "run"))
    states = {}
    for rank in range(scenario.world):
        calls = scenario.calls.get(rank, [])
        made = []
        for seq, (op, size) in enumerate(calls, 1):
            when = NOW - 20 - (len(calls) - seq)
            last = seq == len(calls) and pending
            made.append(
                Made(
                    op,
                    (sites or {}).get(op),
                    when,
                    None if last else when + 0.1,
                    ((size,),) if size else (),
                    ("float32",) if size else (),
                )
            )
        # a member that never called on the group: its agent knows no such group
        groups = {scenario.group: made} if made else {}
        write_state(paths, rank, groups, NOW, sizes={scenario.group: scenario.world})
        states[rank] = read_state(paths.root, rank)
        assert states[rank] is not None
    return states


def live_summaries(states) -> list[str]:
    views = [
        RankView(rank, None, STATE_RUNNING, heartbeat_age=0.5, agent=state)
        for rank, state in states.items()
    ]
    return [f.summary for f in sequence_verdict(views).findings]


# ---- torch's Flight Recorder dump ------------------------------------------------------------


def flight_dumps(tmp_path: Path, scenario: Scenario, pending: bool = True):
    """One pickle per rank in torch 2.13's dump format (gloo: every entry `scheduled`, the
    group's progress in pg_status)."""
    paths = []
    for rank in range(scenario.world):
        calls = scenario.calls.get(rank, [])
        entries = [
            {
                "record_id": seq,
                "pg_id": 0,
                "process_group": ("0", "default_pg"),
                "collective_seq_id": seq,
                "p2p_seq_id": 0,
                "op_id": seq,
                "profiling_name": f"gloo:{op}",
                "time_created_ns": int((NOW - 20 + seq) * 1e9),
                "input_sizes": [[size]] if size else [],
                "input_dtypes": ["Float"] if size else [],
                "output_sizes": [[size]] if size else [],
                "output_dtypes": ["Float"] if size else [],
                "state": "scheduled",
                "time_discovered_started_ns": None,
                "time_discovered_completed_ns": None,
                "retired": False,
                "timeout_ms": 5000,
                "is_p2p": False,
            }
            for seq, (op, size) in enumerate(calls, 1)
        ]
        dump = {
            "version": "2.10",
            "comm_lib_version": "",
            "pg_config": {"": {"name": "", "desc": "", "ranks": ""}},
            "pg_status": {
                "0": {
                    "last_enqueued_collective": len(calls),
                    "last_started_collective": len(calls),
                    "last_completed_collective": max(0, len(calls) - pending),
                }
            },
            "entries": entries,
        }
        path = tmp_path / "fr" / f"comm_lib_trace_rank_{rank}"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(pickle.dumps(dump, protocol=2))
        paths.append(path)
    return [read_flight_dump(str(p)) for p in paths]


# ---- NCCL's watchdog lines -------------------------------------------------------------------


def watchdog_logs(tmp_path: Path, scenario: Scenario) -> Path:
    """ranks/<r>/stderr.log with ProcessGroupNCCL's words: the ranks at the top count time
    out in it; the others print the dump signal's line with how far they got."""
    top = max(len(c) for c in scenario.calls.values())
    root = tmp_path / "nccl"
    for rank, calls in scenario.calls.items():
        made = len(calls)
        tag = f"[rank{rank}]:[E1201 09:14:0{rank}.120551093 ProcessGroupNCCL.cpp"
        pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
        if made == top:
            lines = [
                f"{tag}:616] [Rank {rank}] Watchdog caught collective operation timeout: "
                f"WorkNCCL(SeqNum={top}, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, "
                "Timeout(ms)=600000) ran for 600071 milliseconds before timing out.",
                f"{tag}:1834] {pg} Timeout at NCCL work: {top}, last enqueued NCCL work: "
                f"{top}, last completed NCCL work: {top - 1}.",
            ]
        else:
            lines = [
                f"{tag}:1595] {pg} Received a dump signal due to a collective timeout from  "
                f"rank 0 and we will try our best to dump the debug info. Last enqueued NCCL "
                f"work: {made}, last completed NCCL work: {made}.This is most likely caused "
                "by incorrect usages of collectives, e.g., wrong sizes used across ranks, "
                "the order of collectives is not same for all ranks or the scheduled "
                "collective, for some reason, didn't run. Additionally, this can be caused by "
                "GIL deadlock or other reasons such as network errors or bugs in the "
                "communications library (e.g. NCCL), etc."
            ]
        folder = root / "ranks" / str(rank)
        folder.mkdir(parents=True)
        (folder / "stderr.log").write_text("\n".join(lines) + "\n")
    return root


# ---- NCCL's RAS counts -----------------------------------------------------------------------


def ras_counts(scenario: Scenario) -> list[ledger.RasCount]:
    """What `ncclras` reports per rank of a communicator: its AllReduce launch count."""
    return [
        ledger.RasCount("0x7f3a9c2e41d05b66", rank, "AllReduce", len(calls))
        for rank, calls in scenario.calls.items()
    ]


# ---- the table -------------------------------------------------------------------------------


def says(scenario: Scenario, source: str, tmp_path: Path) -> list[str]:
    if source == "agent":
        return live_summaries(agent_states(tmp_path, scenario))
    if source == "exit":
        cause = explain(agent_states(tmp_path, scenario)).cause
        return [cause.summary] if cause is not None else []
    if source == "flight":
        return [f.summary for f in compare_flight_dumps(flight_dumps(tmp_path, scenario))]
    if source == "watchdog":
        scan = scan_paths([str(watchdog_logs(tmp_path, scenario))])
        return [f.summary for f in scan.findings]
    assert source == "ras"
    (group,) = ledger.from_ras_counts(ras_counts(scenario)).values()
    verdict = ledger.compare_group("default_pg", group)
    return [b.text for b in verdict.behind]


CASES = [
    pytest.param(s, source, id=f"{s.name}-{source}") for s in SCENARIOS for source in s.sources
]


@pytest.mark.parametrize("scenario, source", CASES)
def test_every_source_gives_the_same_verdict_in_the_same_words(scenario, source, tmp_path):
    summaries = says(scenario, source, tmp_path)
    assert any(s.startswith(scenario.verdict) for s in summaries), summaries


@pytest.mark.parametrize("source", LOOP.sources)
def test_the_loop_that_ran_once_more_is_named_by_every_source_that_knows_lines(source, tmp_path):
    sites = {"all_reduce": "train.py:9", "barrier": "train.py:12"}
    states = agent_states(tmp_path, LOOP, sites)
    if source == "agent":
        summaries = live_summaries(states)
    else:
        summaries = [explain(states).cause.summary]
    assert LOOP.verdict in summaries, summaries


def test_a_healthy_group_says_nothing_in_any_source(tmp_path):
    # every rank made all_reduce #3 and saw it complete
    healthy = Scenario("healthy", {0: [AR] * 3, 1: [AR] * 3, 2: [AR] * 3}, "")
    states = agent_states(tmp_path / "agent", healthy, pending=False)
    assert live_summaries(states) == []
    assert explain(states).cause is None
    assert compare_flight_dumps(flight_dumps(tmp_path, healthy, pending=False)) == []
    ((group, progress),) = ledger.from_ras_counts(ras_counts(healthy)).items()
    verdict = ledger.compare_group(group, progress)
    assert verdict.behind == () and verdict.mismatches == () and verdict.hang is None


def test_ras_counts_name_the_many_ranks_behind_not_the_few_ahead():
    # NCCL RAS's report in NVIDIA/nccl#1911 (NCCL 2.26.2, 32 ranks, 4 nodes x 8 GPUs):
    #   #0-0 (fa93daea854b060b) MISMATCH
    #     Communicator ranks have different AllGather operation counts
    #     30 ranks have launched up to operation 640
    #     2 ranks have launched up to operation 641
    #     Rank 12 -- GPU 4 managed by process ... ; Rank 13 -- GPU 5 ...
    # RAS lists the two: the minority, which are ahead. The 30 others never launched #641.
    counts = [
        ledger.RasCount("fa93daea854b060b", rank, "AllGather", 641 if rank in (12, 13) else 640)
        for rank in range(32)
    ]
    ((group, progress),) = ledger.from_ras_counts(counts).items()
    assert group == "fa93daea854b060b:all_gather"
    verdict = ledger.compare_group(group, progress)
    (behind,) = verdict.behind
    assert behind.ranks == tuple(r for r in range(32) if r not in (12, 13))
    assert behind.text == "ranks 0-11,14-31 never called all_gather #641 on group " + group
    assert verdict.waiting == (12, 13) and verdict.hang is None  # launches, not completions


def test_ras_counts_that_agree_say_nothing():
    counts = [ledger.RasCount("fa93daea854b060b", r, "AllReduce", 2398578) for r in range(256)]
    ((group, progress),) = ledger.from_ras_counts(counts).items()
    verdict = ledger.compare_group(group, progress)
    assert verdict.behind == () and verdict.mismatches == () and verdict.hang is None


def test_a_p2p_group_is_never_judged_by_its_counts(tmp_path):
    # send/recv numbers differ per rank by design: rank 0 sent twice, rank 1 received once
    pair = Scenario("p2p", {0: [("send", 4)] * 2, 1: [("recv", 4)]}, "", world=2)
    states = agent_states(tmp_path, pair)
    assert live_summaries(states) == []


# ---- one kind and one recipe per verdict, whichever source saw it ----------------------------


def findings_of(scenario: Scenario, source: str, tmp_path: Path):
    """What each source's real reader made of the scenario, as findings."""
    if source == "agent":
        states = agent_states(tmp_path, scenario)
        views = [
            RankView(rank, None, STATE_RUNNING, heartbeat_age=0.5, agent=state)
            for rank, state in states.items()
        ]
        return list(sequence_verdict(views).findings)
    if source == "exit":
        cause = explain(agent_states(tmp_path, scenario)).cause
        return [cause.finding()] if cause is not None else []
    if source == "flight":
        return compare_flight_dumps(flight_dumps(tmp_path, scenario))
    if source == "watchdog":
        return scan_paths([str(watchdog_logs(tmp_path, scenario))]).findings
    assert source == "ras"
    # NCCL RAS's JSON report of the counts (NCCL 2.29's writer, tests/testkit/ras_fake.py),
    # read by the real reader and judged with the ranks' stacks: the ones behind are outside
    # any collective, the others wait in all_reduce.
    top = max(len(c) for c in scenario.calls.values())
    ranks = [
        (rank, "node-a", 61000 + rank, {"AllReduce": len(calls)})
        for rank, calls in scenario.calls.items()
    ]
    path = tmp_path / "ras.json"
    path.write_bytes(nccl_json("2.29.2", ranks))
    stacks = {
        61000 + r: ("all_reduce" if len(c) == top else None) for r, c in scenario.calls.items()
    }
    rank_of = {61000 + r: r for r in scenario.calls}
    return ras_findings([read_ras_file(str(path))], stacks, rank_of)


VERDICT_OF = {
    "rank behind": VERDICT_BEHIND,
    "rank several calls behind": VERDICT_BEHIND,
    "op mismatch": VERDICT_MISMATCH,
    "rank 0 is the culprit": VERDICT_MISMATCH,
    "all in #M": VERDICT_HANG,
    "subgroup member that never called": VERDICT_BEHIND,
}
TABLE_CASES = [
    pytest.param(s, source, id=f"{s.name}-{source}")
    for s in SCENARIOS
    for source in (*s.sources, *(("ras",) if s.name == "rank behind" else ()))
]


@pytest.mark.parametrize("scenario, source", TABLE_CASES)
def test_one_verdict_is_one_kind_and_one_recipe_from_every_source(scenario, source, tmp_path):
    # GIVEN what the ranks called, in the source's own format, read by its real reader
    found = findings_of(scenario, source, tmp_path)
    # THEN the ledger's verdict comes out as the table's kind and recipe, with its culprits
    outcome = OUTCOMES[VERDICT_OF[scenario.name]]
    ours = [f for f in found if (f.kind, f.recipe) == (outcome.kind, outcome.recipe)]
    assert ours, [(f.kind, f.recipe, f.summary) for f in found]
    finding = ours[0]
    if outcome.kind != "hang":
        assert 2 in finding.ranks or 0 in finding.ranks
        assert finding.collective is not None
    assert finding.sources, finding
