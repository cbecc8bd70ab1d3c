"""Verdicts that hold (analysis/timing_hold.py, analysis/timing_comm.py): the run's blocks of
steps, the older weighing less, on simulated synchronous jobs in the agent's own format
(tests/timing_sim.py; the `blocks` rows are made by the agent's own code), looked at again and
again as a user who re-runs `dump` would."""

from __future__ import annotations

import random

import pytest
from timing_sim import simulate, views

from mldebug.agent.timing_blocks import BLOCK, Blocks
from mldebug.analysis.judge import Evidence, judge
from mldebug.analysis.timing import judge_timing
from mldebug.analysis.timing_hold import common_blocks, judge_held, since_of, weighted_tail
from mldebug.collect.agenttiming import parse_timing
from mldebug.model import KIND_NCCL_NETWORK, SEVERITY_INFO, SEVERITY_WARNING, Finding
from mldebug.wording import finding_text

LOOKS = range(200, 1001, 100)  # the steps at which the user runs `dump` again


def found(**job) -> list[Finding]:
    return list(judge_timing(views(simulate(**job))).findings)


def named(findings: list[Finding]) -> list[tuple[str, tuple[int, ...]]]:
    return [(f.kind, f.ranks) for f in findings]


@pytest.mark.parametrize("seed", range(3))
def test_a_small_slowdown_in_heavy_jitter_is_named_at_every_look_once_the_run_holds_it(seed):
    # 1.1x compute under ±30% jitter a step: 64-step windows alone name it now and then.
    job = dict(world=4, slow_rank=3, factor=1.1, jitter=0.3, seed=seed)
    looks = [named(found(**job, steps=steps)) for steps in range(400, 1001, 100)]
    assert looks == [[("straggler", (3,))]] * len(looks)


def test_the_window_alone_would_flicker_on_the_same_job():
    # The same looks with the run's blocks left out: what `dump` said before.
    states_at = [simulate(world=4, slow_rank=3, factor=1.1, jitter=0.3, seed=1, steps=s)
                 for s in range(400, 1001, 100)]  # fmt: skip
    for states in states_at:
        for state in states:
            state["timing"]["blocks"] = []
    looks = [named(list(judge_timing(views(states)).findings)) for states in states_at]
    assert [] in looks  # the window misses it at some look (the reason for the blocks)


def test_the_straggler_finding_says_since_when():
    # Rank 3 turns slow at step 300 and stays slow.
    findings = found(world=4, slow_rank=3, factor=1.3, jitter=0.1, steps=800,
                     slow_steps=(300, 10_000))  # fmt: skip
    assert named(findings) == [("straggler", (3,))]
    facts = dict(findings[0].facts)
    assert 300 - 2 * BLOCK <= int(facts["since_step"]) <= 300 + 2 * BLOCK
    assert float(facts["since_s"]) == pytest.approx(500 * 0.092, rel=0.2)  # 92 ms steps
    assert finding_text(findings[0]).endswith(f"(since step {facts['since_step']}, "
                                              f"{float(facts['since_s']):.0f} s ago)")  # fmt: skip


def test_a_straggler_that_recovered_stays_named_a_while_then_fades():
    job = dict(world=4, slow_rank=3, factor=1.3, jitter=0.1, slow_steps=(1, 400))
    # 100 steps after it recovered its last 64-step window is clean: the run still names it.
    assert named(found(**job, steps=500)) == [("straggler", (3,))]
    # A half-life (512 steps) later, it is gone.
    assert [named(found(**job, steps=s)) for s in (900, 1100)] == [[], []]


@pytest.mark.parametrize("seed", range(4))
def test_a_healthy_job_is_named_at_no_look(seed):
    # ±10% jitter, a 1 s checkpoint pause on rank 0 every 25 steps, GC pauses.
    for steps in LOOKS:
        findings = found(world=4, jitter=0.1, checkpoint_every=25, gc_every=10, seed=seed,
                         steps=steps)  # fmt: skip
        assert findings == [], (steps, [finding_text(f) for f in findings])


def test_every_rank_waiting_for_data_holds_over_the_run():
    for steps in (300, 600, 900):
        assert named(found(world=4, data=0.05, compute=0.04, jitter=0.1, steps=steps)) == [
            ("input_bound", (0, 1, 2, 3))
        ]


def test_comm_bound_is_info_while_its_share_holds():
    for steps in (100, 400, 800):
        findings = found(world=4, compute=0.02, comm=0.05, jitter=0.1, steps=steps)
        assert named(findings) == [("comm_bound", (0, 1, 2, 3))]
        assert findings[0].severity == SEVERITY_INFO
        assert "usual for FSDP / ZeRO-3" in findings[0].summary


def test_comm_bound_is_a_warning_when_its_share_grew_over_the_run():
    findings = found(world=4, compute=0.03, comm=0.01, jitter=0.1, steps=600,
                     comm_later=(300, 0.1))  # fmt: skip
    assert named(findings) == [("comm_bound", (0, 1, 2, 3))]
    assert findings[0].severity == SEVERITY_WARNING
    assert "its share grew over the run from " in findings[0].summary
    facts = dict(findings[0].facts)
    assert float(facts["share_late"]) > float(facts["share_early"]) + 0.15


def test_comm_bound_is_a_warning_when_the_nccl_log_shows_sockets():
    states = simulate(world=4, compute=0.02, comm=0.05, jitter=0.1, steps=200)
    timing = judge_timing(views(states))
    sockets = Finding(KIND_NCCL_NETWORK, (2,), "rank 2 uses another NCCL network than the rest",
                      recipe="nccl-sockets-instead-of-ib", severity=SEVERITY_WARNING)  # fmt: skip
    verdict = judge(Evidence(views=views(states), world_size=4, timing=timing, found=[sockets]))
    comm = [f for f in verdict if f.kind == "comm_bound"]
    assert comm and comm[0].severity == SEVERITY_WARNING
    assert "the NCCL log shows rank 2 on sockets where InfiniBand was expected" in comm[0].then
    alone = judge(Evidence(views=views(states), world_size=4, timing=timing))
    assert [f.severity for f in alone if f.kind == "comm_bound"] == [SEVERITY_INFO]


def test_the_weighted_tail_is_exact_against_counting():
    rng = random.Random(0)
    w, n = [4, 3, 2, 1, 1], 3
    draws = 200_000
    sums = [sum(wi * rng.randrange(n) for wi in w) for _ in range(draws)]
    for total in (10, 14, 17, 20):
        counted = sum(s >= total for s in sums) / draws
        assert weighted_tail(total, w, n) == pytest.approx(counted, abs=0.004)
    assert weighted_tail(0, w, n) == 1.0 and weighted_tail(23, w, n) == 0.0


def test_since_is_where_the_places_start_to_add_up():
    assert since_of([-1, 0.5, -1.5, 1.5, 1.5, 0.5, 1.5]) == 3
    assert since_of([1.5] * 5) == 0


def test_a_rank_that_pauses_now_and_then_is_placed_as_often_above_as_below_by_the_blocks():
    # Rank 0 of 2 pauses 1 s every 25 steps (a checkpoint); the other waits through it. The
    # blocks leave that step out on both: a median of 8 with it kept moves up a place on
    # rank 0 in every block that holds one (62% of those blocks place it above the other,
    # with the same seeds), which over the run reads as a rank slower step after step.
    above = paused = 0
    for seed in range(4):
        states = simulate(world=2, jitter=0.1, checkpoint_every=25, seed=seed, steps=1600)
        rows = common_blocks({v.rank: v.agent.timing.blocks for v in views(states)})
        for row in rows:
            if any(
                step % 25 == 0 for step in range(row[0].block * BLOCK, (row[0].block + 1) * BLOCK)
            ):
                paused += 1
                above += row[0].work > row[1].work
    assert paused > 200 and above / paused <= 0.55


def test_the_agents_blocks_are_medians_of_their_steps_and_read_back_checked():
    blocks = Blocks()
    for step in range(1, 3 * BLOCK + 1):
        wall = 0.1 if step % 8 else 1.1  # a pause now and then moves no median
        blocks.add(step, 1000.0 + step, wall, 0.02, 0.01, 0.0)
    rows = list(blocks.rows)
    assert [r[0] for r in rows] == [0, 1, 2]  # block 0 (steps 1-15) to 2; 3 is still open
    assert rows[1][:4] == [1, BLOCK, 1000.0 + BLOCK, BLOCK]
    assert rows[1][4:] == [0.1, 0.02, 0.01, 0.0, 0.08, 0.07]
    bad = [[1, 2, 3], ["x", 1, 2.0, 1, 0, 0, 0, 0, 0, 0], [3, 48, 1e400, 16, 1, 0, 0, 0, 1, 1]]
    parsed = parse_timing({"version": 1, "blocks": [*rows, *bad]})
    assert parsed is not None and [b.block for b in parsed.blocks] == [0, 1, 2]
    assert parsed.blocks[1].work == 0.08


def test_a_rank_that_costs_the_others_under_3_percent_is_not_named_however_sure():
    # 1.02x compute: the run's evidence is sure of the order, the cost is too small to warn.
    for steps in (400, 1000):
        job = dict(world=4, slow_rank=3, factor=1.02, jitter=0.05, steps=steps)
        assert found(**job) == []
    blocks = {v.rank: v.agent.timing.blocks for v in views(simulate(**job))}
    held = judge_held(blocks)
    assert held is not None and held.late == (3,)  # the order alone is no warning


@pytest.mark.parametrize("seed", range(3))
def test_a_straggler_is_named_beside_a_rank_that_stands_out_in_a_part_that_costs_nothing(seed):
    # Recorded on 4 ranks of a 1.1x job on these 2 cores: besides the straggler, rank 0
    # waited a little longer for its data every block. The ranks' order says both stand
    # out; together they fail the bars (rank 0 costs the others nothing), rank 1 alone
    # clears them.
    job = dict(world=4, slow_rank=1, factor=1.1, jitter=0.1, seed=seed, more_data={0: 0.0004})
    for steps in (400, 700, 1000):
        blocks = {v.rank: v.agent.timing.blocks for v in views(simulate(**job, steps=steps))}
        held = judge_held(blocks)
        assert held is not None and held.late == (0, 1)  # the order names both
        assert named(found(**job, steps=steps)) == [("straggler", (1,))]


@pytest.mark.parametrize("seed", range(3))
def test_among_3_ranks_a_straggler_is_named_beside_a_rank_whose_data_wait_stands_out(seed):
    # Seen on 3 ranks of a 1.4x job beside CPU-heavy neighbours: rank 0 waited a little
    # longer for its data every block. Two of three ranks stood out, which read as "most
    # ranks stand out", and neither the window nor the run's blocks named anyone, at 41 of
    # 44 looks. They stand out in different parts: each is judged alone.
    job = dict(world=3, slow_rank=2, factor=1.4, jitter=0.1, seed=seed, more_data={0: 0.0004})
    for steps in (200, 600):
        blocks = {v.rank: v.agent.timing.blocks for v in views(simulate(**job, steps=steps))}
        held = judge_held(blocks)
        assert held is not None and held.late == (0, 2)
        assert (held.part[0], held.part[2]) == ("data", "work")
        assert named(found(**job, steps=steps)) == [("straggler", (2,))]


def test_two_of_3_ranks_standing_out_in_the_same_part_are_a_fast_third_rank_not_two_slow():
    # Rank 0 computes 0.7x as long as the others: ranks 1 and 2 both place above it in
    # every block, in the same part. Nobody is the straggler.
    job = dict(world=3, slow_rank=0, factor=0.7, jitter=0.05, steps=600)
    blocks = {v.rank: v.agent.timing.blocks for v in views(simulate(**job))}
    held = judge_held(blocks)
    assert held is not None and held.late == ()
    assert (held.part[1], held.part[2]) == ("work", "work")
    assert max(held.chance[1], held.chance[2]) < 1e-3  # both stand out
    assert [f for f in found(**job) if f.kind == "straggler"] == []


def _without_blocks(states: list[dict]) -> list[dict]:
    for state in states:
        state["timing"]["blocks"] = []
    return states


@pytest.mark.parametrize("seed", [0, 3])
def test_a_burst_of_a_few_seconds_on_one_rank_late_in_a_healthy_run_is_not_a_straggler(seed):
    # A neighbour's work slows rank 1 of 2 by 1.2x over its last 32 steps of 600 (3 s): in
    # these two runs the window names it, while the run's blocks place it below the middle.
    job = dict(world=2, slow_rank=1, factor=1.2, jitter=0.1, seed=seed, steps=600,
               slow_steps=(568, 600))  # fmt: skip
    window = named(list(judge_timing(views(_without_blocks(simulate(**job)))).findings))
    assert window == [("straggler", (1,))]  # the 64-step window alone names it
    assert found(**job) == []  # the run's blocks rank it no higher than chance: a burst


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("seed", range(3))
def test_a_rank_that_turns_slow_late_in_the_run_is_named_once_the_blocks_hold_it(world, seed):
    job = dict(world=world, slow_rank=1, factor=1.4, jitter=0.1, seed=seed,
               slow_steps=(540, 10_000))  # fmt: skip
    assert [named(found(**job, steps=steps)) for steps in (760, 860, 960)] == [
        [("straggler", (1,))]
    ] * 3
