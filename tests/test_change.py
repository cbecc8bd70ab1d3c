"""Change over time: the agent's whole-run history (agent/step_history.py), its reader, and
the analysis that names a lasting slowdown (analysis/change.py) and compares two runs
(analysis/compare.py, `mldebug compare`).

The step durations are generated (testkit/changekit.py, with seeds); the history is made by
the real agent class, written as JSON, read by the real reader and judged by the real
analysis. The real multi-rank jobs are in test_change_jobs.py."""

from __future__ import annotations

import json
import os
import random
from dataclasses import replace

import pytest
from testkit.changekit import (
    busier_node,
    calls_section,
    healthy,
    history_section,
    slower,
    views_of,
)

from mldebug import cli
from mldebug.agent import step_history
from mldebug.analysis.change import (
    CAUSE_JOB,
    CAUSE_NODE,
    KIND_SLOWDOWN,
    Change,
    Peer,
    busier,
    change_finding,
    rank_change,
)
from mldebug.analysis.compare import compare
from mldebug.analysis.judge import Evidence, judge
from mldebug.collect.agenttiming import parse_timing
from mldebug.errors import EXIT_NO_TARGET, EXIT_OK, EXIT_USAGE
from mldebug.launch.changes import _same
from mldebug.report.compare import text_report, verdict


def job(shape_of, ranks: int = 4, steps: int = 800, seed: int = 0) -> list:
    return views_of(
        [history_section(shape_of(random.Random(seed * 100 + r), r), steps) for r in range(ranks)]
    )


def data_slowdown(extra: float = 0.06, at: int = 600):
    return lambda rng, rank: slower(healthy(rng), at, "data", extra)


# ---------------------------------------------------------------- healthy jobs stay silent


@pytest.mark.parametrize("seed", range(12))
def test_healthy_jobs_with_evaluation_and_checkpoint_pauses_are_no_change(seed):
    views = job(lambda rng, rank: healthy(rng), steps=1500, seed=seed)
    assert change_finding(views) is None


def test_pauses_longer_than_a_block_and_warm_up_are_no_change():
    """An evaluation of two steps' length every 150 steps, a long warm-up (the first 40
    steps 4x slower): faster later is never a slowdown, a pause is over by the newest block."""

    def shape(rng, rank):
        base = healthy(rng, warmup=40, eval_every=150, eval_seconds=2.0)
        return lambda step: base(step) if step % 150 != 0 else base(step - 1)

    assert change_finding(job(shape, steps=1200)) is None


def test_a_job_whose_step_is_steady_then_speeds_up_is_no_change():
    def faster(rng, rank):
        base = healthy(rng, compute=0.06)
        return lambda step: base(step) if step < 400 else tuple(p / 3 for p in base(step))

    assert change_finding(job(faster)) is None


def test_a_slowdown_too_recent_is_not_said_yet():
    """12 steps since the change (3 blocks): not yet lasting."""
    assert change_finding(job(data_slowdown(at=788))) is None


# ---------------------------------------------------------------- slowdowns are named


def test_an_all_rank_data_slowdown_is_named_with_when_how_much_and_what():
    finding = change_finding(job(data_slowdown()))
    assert finding is not None and finding.kind == KIND_SLOWDOWN
    assert finding.ranks == (0, 1, 2, 3) and finding.waiting == ()
    assert finding.severity == "warning" and finding.recipe == "slowdown-over-time"
    facts = dict(finding.facts)
    assert facts["grew in"] == "data"
    assert 590 <= int(facts["since"].split("~")[1]) <= 604
    assert finding.summary.startswith("from step ~")
    assert "every rank's step takes 3.3x longer (26 ms -> 86 ms), all of it waiting for data" in (
        finding.summary
    )


@pytest.mark.parametrize("extra", [0.01, 0.02, 0.1])
def test_slowdowns_of_each_size_are_named(extra):
    finding = change_finding(job(data_slowdown(extra)))
    assert finding is not None and dict(finding.facts)["grew in"] == "data"


def test_a_step_that_grows_gradually_is_said_so_from_where_it_began():
    """Compute grows by 50 ms over steps 300-900 (a leak that slows every step)."""

    def ramp(rng, rank):
        base = healthy(rng)

        def shape(step):
            c, d, co, s = base(step)
            return c + 0.05 * min(1.0, max(0.0, (step - 300) / 600)), d, co, s

        return shape

    finding = change_finding(job(ramp, steps=1000))
    assert finding is not None and dict(finding.facts)["shape"] == "gradual"
    assert 290 <= int(dict(finding.facts)["since"].split("~")[1]) <= 400
    assert "every rank's step grows longer gradually: now " in finding.summary
    assert "computing" in finding.summary
    steady = change_finding(job(data_slowdown()))
    assert steady is not None and dict(steady.facts)["shape"] == "a step"


def test_a_rank_whose_state_is_older_is_judged_where_the_others_changed():
    """Rank 3's state is 150 steps behind: its change alone has not lasted 5 s yet."""
    shape = data_slowdown(at=610)
    sections = [history_section(shape(random.Random(r), r), 800) for r in range(3)]
    sections.append(history_section(shape(random.Random(3), 3), 650))
    alone = rank_change(3, parse_timing(sections[3]).history)
    assert alone is None
    finding = change_finding(views_of(sections))
    assert finding is not None and finding.ranks == (0, 1, 2, 3)
    assert "every rank's step" in finding.summary


def test_one_rank_that_got_slower_is_named_and_the_others_wait_for_it():
    def shape(rng, rank):
        part = "compute" if rank == 2 else "collective"
        return slower(healthy(rng), 500, part, 0.03)

    finding = change_finding(job(shape))
    assert finding is not None
    assert finding.ranks == (2,) and finding.waiting == (0, 1, 3)
    assert "rank 2's step takes" in finding.summary and "computing" in finding.summary
    assert "ranks 0-1,3 wait for it" in finding.summary


def test_a_change_long_ago_is_still_seen_in_the_merged_rows():
    """5,000 steps, slower from step 1,000: the old rows were merged several times."""
    section = history_section(slower(healthy(random.Random(3)), 1000, "compute", 0.05), 5000)
    assert len(section["history"]["rows"]) <= step_history.RECENT + step_history.OLD
    assert len(json.dumps(section["history"])) < 12_000
    change = rank_change(0, parse_timing(section).history)
    assert change is not None and 900 <= change.since <= 1100


def test_a_job_without_steps_is_judged_on_its_collectives_cadence():
    views = views_of(
        [
            calls_section(slower(healthy(random.Random(r), eval_every=0), 500, "data", 0.05), 700)
            for r in range(3)
        ]
    )
    finding = change_finding(views)
    assert finding is not None
    assert finding.summary.startswith("from collective ~")
    assert "every rank's collective takes" in finding.summary


def test_the_judge_keeps_the_finding_and_its_warning():
    views = job(data_slowdown())
    findings = judge(Evidence(views=views, world_size=4))
    assert [f.kind for f in findings if f.kind == KIND_SLOWDOWN] == [KIND_SLOWDOWN]
    assert not [f for f in findings if f.kind == "straggler"]


# ---------------------------------------------------------------- a busier node is not a slower job


def busier_job(stretch: float, explained: float, ranks: int = 2, at: int = 500, seed: int = 0):
    """A communication-heavy job (its collectives as long as its compute) whose node gets
    busier at step `at`: compute and collectives `stretch` times as long, the kernel's
    run-queue count holding `explained` of the growth on every rank."""
    sections = []
    for rank in range(ranks):
        rng = random.Random(seed * 100 + rank)
        base = healthy(rng, compute=0.02, collective=0.02, eval_every=0, ckpt_every=0)
        shape, delay = busier_node(base, at, stretch, explained, rng)
        sections.append(history_section(shape, 800, delay=delay))
    return views_of(sections)


@pytest.mark.parametrize("stretch", [1.5, 1.8, 2.5])
@pytest.mark.parametrize("seed", range(3))
def test_a_node_that_got_busier_is_said_as_info_never_a_warning(stretch, seed):
    # The figures of the healthy comm-heavy job over 3 minutes on a shared 2-core machine:
    # 1.5x-1.8x slower as the load climbed, the steps' run-queue delay most of it.
    views = busier_job(stretch, explained=0.85, seed=seed)
    finding = change_finding(views)
    assert finding is not None and finding.kind == KIND_SLOWDOWN
    facts = dict(finding.facts)
    assert finding.severity == "info" and facts["cause"] == CAUSE_NODE
    assert float(facts["less run-queue delay"].rstrip("x")) < 1.3
    assert "the node got busier, not the job: the kernel held the ranks off their CPUs " in (
        finding.summary
    )
    # ...and the judge leaves it at info: no warning at all.
    judged = judge(Evidence(views=views, world_size=len(views)))
    assert [f for f in judged if f.severity != "info"] == []


def test_a_slowdown_the_run_queue_delay_does_not_explain_is_still_a_warning():
    # The step got 2x slower but the kernel held the ranks off their CPUs no longer than
    # before: the job itself got slower (its collectives, a slower link).
    views = busier_job(2.0, explained=0.0)
    finding = change_finding(views)
    assert finding is not None and finding.severity == "warning"
    assert dict(finding.facts)["cause"] == CAUSE_JOB
    assert finding.summary.endswith(": a lasting change over the run")
    # Part of it explained (a busier node and a slower job at once): each rank's own
    # delay holds a fifth of its growth, and its peer's another fifth of it (the peer's
    # held threads in their collectives): what is left warns.
    mixed = change_finding(busier_job(2.5, explained=0.2))
    assert mixed is not None and mixed.severity == "warning"
    assert dict(mixed.facts)["cause"] == CAUSE_JOB


def test_a_data_slowdown_with_the_delay_measured_is_still_a_warning():
    # The genuine case: every rank's DataLoader got slower (a sleep, not a busier CPU);
    # the run-queue delay is measured and did not grow.
    def shape(rng, rank):
        return slower(healthy(rng), 600, "data", 0.06)

    sections = [
        history_section(shape(random.Random(r), r), 800, delay=lambda step, parts: 0.002)
        for r in range(3)
    ]
    finding = change_finding(views_of(sections))
    assert finding is not None and finding.severity == "warning"
    assert dict(finding.facts)["cause"] == CAUSE_JOB
    assert dict(finding.facts)["run-queue delay"] == "2 ms -> 2 ms"


def test_a_busier_node_seen_on_one_rank_only_is_not_the_nodes_doing():
    # Rank 0's delay grew, rank 1's did not, yet both slowed: not "on every rank".
    sections = []
    for rank, explained in ((0, 1.0), (1, 0.0)):
        rng = random.Random(rank)
        base = healthy(rng, compute=0.02, collective=0.02, eval_every=0, ckpt_every=0)
        shape, delay = busier_node(base, 500, 2.0, explained, rng)
        sections.append(history_section(shape, 800, delay=delay))
    finding = change_finding(views_of(sections))
    assert finding is not None and dict(finding.facts)["cause"] == CAUSE_JOB


def waiting_rank(parts_after: tuple[float, ...]) -> Change:
    """Rank 0 of a 2-rank job, 47 ms a step, then 113 ms, its run-queue delay 26 -> 66 ms
    (the figures of a healthy job that got 2.4x slower among busy neighbours)."""
    return Change(0, 1034, 0.0, 0.047, 0.113, (0.02, 0.0, 0.027, 0.0), parts_after, 56, 6.0,
                  delay_before=0.026, delay_after=0.066)  # fmt: skip


def test_a_rank_waiting_for_a_peer_held_off_its_cpu_is_explained_by_the_peers_delay():
    # Rank 0's step grew waiting in collectives; its own delay is 61% of the growth. Rank
    # 1, whose step did not show the change, was held off its CPU 60 ms more a step: rank
    # 0 waited for that. Judged on its own delay alone it would be 1.54x: a warning.
    waiting = waiting_rank((0.02, 0.0, 0.093, 0.0))
    alone = busier([waiting], 0.047, 0.113)
    assert alone is not None and alone.left > 1.5
    late = {0: Peer(0.040), 1: Peer(0.060)}
    held = busier([waiting], 0.047, 0.113, late)
    assert held is not None and held.node and held.left < 1.3
    # A peer's delay is never more than the rank's own growth...
    held = busier([waiting], 0.047, 0.113, {**late, 1: Peer(0.500)})
    assert held is not None and held.grown == pytest.approx(0.066) and held.left == 1.0
    # ...explains nothing of a rank whose step grew in its own compute...
    computing = waiting_rank((0.086, 0.0, 0.027, 0.0))
    held = busier([computing], 0.047, 0.113, late)
    assert held is not None and held.left == pytest.approx(alone.left)
    # ...and a peer whose delay did not grow (a slower network) explains nothing either.
    held = busier([waiting], 0.047, 0.113, {**late, 1: Peer(0.001)})
    assert held is not None and held.left == pytest.approx(alone.left, abs=0.03)
    assert held.left > 1.5


def test_ranks_that_wait_for_each_other_in_a_ring_are_explained_by_both_delays():
    # The figures of the 3-minute healthy job, its compute a host wait, beside 6 bursty
    # neighbours in a 4-worker run: each rank's step 88 -> 236 ms, all of it in its 16 MiB
    # all_reduce, which both ranks' collectives share (a ring of 2 waits for the other
    # side's held threads at every step), each rank held off its CPU ~65 ms more a step.
    # Its own delay alone leaves 1.94x: a warning on a healthy job.
    ring = [
        Change(rank, 1200, 0.0, 0.088, 0.236, (0.0, 0.010, 0.078, 0.0),
               (0.0, 0.010, 0.226, 0.0), 300, 70.0, delay_before=0.010, delay_after=0.075)
        for rank in (0, 1)
    ]  # fmt: skip
    alone = busier(ring, 0.088, 0.236)
    assert alone is not None and alone.left > 1.9
    held = busier(ring, 0.088, 0.236, {0: Peer(0.065), 1: Peer(0.065)})
    assert held is not None and held.node and held.left < 1.3
    # The same growth with no delay grown on either side is the job's: a warning.
    slower = [replace(c, delay_after=0.012) for c in ring]
    held = busier(slower, 0.088, 0.236, {0: Peer(0.002), 1: Peer(0.002)})
    assert held is not None and not held.node and held.left > 1.5


def test_a_rank_waiting_in_part_for_a_peer_is_explained_by_both_delays():
    # The CI figures of the 3-minute healthy job beside 6 bursty neighbours: rank 0's step
    # 41 -> 143 ms, 77% of the growth waiting in collectives, its own delay 20 -> 92 ms;
    # rank 1 (no change of its own found) was held off its CPU 49 ms more a step. Rank 0
    # waits for rank 1's late arrival, then for the collective among its own held threads:
    # both delays explain it. Its own alone leaves 1.77x: a warning on a healthy job.
    waiting = Change(0, 1294, 0.0, 0.041, 0.143, (0.02, 0.0, 0.021, 0.0),
                     (0.043, 0.0, 0.1, 0.0), 164, 17.0, gradual=True,
                     delay_before=0.020, delay_after=0.092)  # fmt: skip
    assert 0.75 < waiting.share("collective") < 0.8
    alone = busier([waiting], 0.041, 0.143)
    assert alone is not None and alone.left > 1.5
    late = {0: Peer(0.057), 1: Peer(0.049)}
    held = busier([waiting], 0.041, 0.143, late)
    assert held is not None and held.node and held.left < 1.3
    # A rank whose growth is its own work is not helped by a peer's delay.
    working = Change(0, 1294, 0.0, 0.041, 0.143, (0.02, 0.0, 0.021, 0.0),
                     (0.122, 0.0, 0.021, 0.0), 164, 17.0, gradual=True,
                     delay_before=0.020, delay_after=0.092)  # fmt: skip
    held = busier([working], 0.041, 0.143, late)
    assert held is not None and held.left == pytest.approx(alone.left)


# ---------------------------------------------------------------- the history as data


def test_the_reader_leaves_out_bad_rows_and_unordered_histories():
    good = history_section(healthy(random.Random(1)), 200)
    rows = good["history"]["rows"]
    bad = [["x", 1, 2, 3, 4, 5, 6, 7], [1, 2], [5, 9, 1, 4, 0.1, 0, 0, 0], [5, 1, 2, 0, 1, 0, 0, 0]]
    timing = parse_timing(
        {**good, "history": {"unit": "steps", "rows": [*rows[:3], *bad, *rows[3:]]}}
    )
    assert timing is not None and timing.history == parse_timing(good).history  # left out
    unordered = [*rows[:3], rows[0], *rows[3:]]
    timing = parse_timing({**good, "history": {"unit": "steps", "rows": unordered}})
    assert timing is not None and timing.history == ()  # out of order: none of it trusted
    timing = parse_timing({**good, "history": {"unit": "sql", "rows": rows}})
    assert timing is not None and timing.history == ()
    timing = parse_timing({**good, "history": {"unit": "steps", "rows": [*rows, [1e9] * 8]}})
    assert timing is not None and timing.history == parse_timing(good).history


def test_the_agent_keeps_steps_rather_than_cadence_once_steps_are_counted():
    history = step_history.StepHistory()
    for n in range(1, 40):
        history.add_call(n, 100.0 + n * 0.1, 0.01, 0.0, 0.0)
    assert history.rows()["unit"] == "calls"
    for n in range(1, 9):
        history.add_step(n, 200.0 + n * 0.1, 0.1, 0.01, 0.0, 0.0)
    history.add_call(99, 300.0, 0.01, 0.0, 0.0)
    assert history.rows() == {
        "unit": "steps",
        "rows": [
            [1, 200.1, 200.5, 4, 0.1, 0.01, 0.0, 0.0],
            [5, 200.5, 200.9, 4, 0.1, 0.01, 0.0, 0.0],
        ],
    }


# ---------------------------------------------------------------- compare


def timings(views):
    return {v.rank: v.agent.timing for v in views}


def test_compare_says_what_got_slower_on_every_rank():
    a = timings(job(lambda rng, rank: healthy(rng), steps=400))
    b = timings(job(lambda rng, rank: slower(healthy(rng), 0, "data", 0.05), steps=400))
    comparison = compare("old", a, "new", b)
    assert comparison is not None and comparison.slower == ("data",)
    assert comparison.where == () and 2.5 < comparison.ratio < 3.5
    said = verdict(comparison)
    assert said.startswith("B's steps are ") and "slower than A's" in said
    assert "waiting for data (+5" in said and "on every rank alike" in said
    text = text_report(comparison)
    assert "waiting for data" in text.splitlines()[5]


def test_compare_names_the_rank_where_the_time_went():
    a = timings(job(lambda rng, rank: healthy(rng), steps=400))

    def shape(rng, rank):
        return slower(healthy(rng), 0, "compute" if rank == 1 else "collective", 0.03)

    comparison = compare("old", a, "new", timings(job(shape, steps=400)))
    assert comparison is not None and comparison.where == (1,)
    assert "where: rank 1 (the others wait for it in collectives)" in verdict(comparison)


def test_compare_says_when_a_run_itself_slowed_down():
    a = timings(job(lambda rng, rank: healthy(rng), steps=400))
    comparison = compare("old", a, "new", timings(job(data_slowdown(at=300), steps=800)))
    assert comparison is not None
    assert any(n.startswith("new itself slowed down from step ~") for n in comparison.notes)


def run_dir(tmp_path, name, states=None, mode=0o700):
    root = tmp_path / name
    (root / "ranks").mkdir(parents=True)
    (root / "run.json").write_text(json.dumps({"status": "succeeded"}))
    for rank, timing in (states or {}).items():
        folder = root / "ranks" / str(rank)
        folder.mkdir()
        state = {"version": 1, "rank": rank, "pid": 1000 + rank, "time": 1.0, "timing": timing}
        (folder / "state.json").write_text(json.dumps(state))
    os.chmod(root, mode)
    return root


def test_compare_on_the_command_line(tmp_path, capsys):
    a = run_dir(tmp_path, "a", {0: history_section(healthy(random.Random(1)), 300)})
    b = run_dir(
        tmp_path, "b", {0: history_section(slower(healthy(random.Random(2)), 0, "sync", 0.03), 300)}
    )
    assert cli.main(["compare", str(a), str(b)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "host syncs" in out and "slower: host syncs" in out
    assert cli.main(["compare", "--json", str(a), str(b)]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["slower"] == ["sync"]
    assert cli.main(["compare", "--fail-slower", "1.2", str(a), str(b)]) == 1
    assert cli.main(["compare", "--fail-slower", "5", str(a), str(b)]) == EXIT_OK


def test_compare_bad_input_is_one_line_and_its_exit_code(tmp_path, capsys):
    good = run_dir(tmp_path, "good", {0: history_section(healthy(random.Random(1)), 300)})
    empty = run_dir(tmp_path, "empty", {})
    shared = run_dir(tmp_path, "shared", {0: history_section(healthy(random.Random(1)), 300)})
    os.chmod(shared, 0o777)
    cases = [
        ([str(good), str(tmp_path / "missing")], EXIT_NO_TARGET, "is not an mldebug run directory"),
        ([str(good), str(empty)], EXIT_NO_TARGET, "has no step timing"),
        ([str(shared), str(good)], EXIT_NO_TARGET, "is writable by others"),
        ([str(good)], EXIT_USAGE, "the following arguments are required"),
        (["--fail-slower", "0.5", str(good), str(good)], EXIT_USAGE, "not between 1 and 1000"),
    ]
    for args, code, words in cases:
        assert cli.main(["compare", *args]) == code, args
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err


def test_the_console_says_one_change_once_though_checks_place_it_a_few_blocks_apart():
    assert _same(((0, 1), 98), ((0, 1), 82))
    assert _same(((0, 1), 5000), ((0, 1), 5800))  # a long run's merged rows
    assert not _same(((0, 1), 98), ((0, 1), 400))  # a later change
    assert not _same(((0, 1), 98), ((1,), 98))
