"""`attach --k8s`: the live view over the pods of the recorded PyTorchJob (testkit.k8s),
through the real ClusterPoller, kubectl stand-in, `mldebug collect` in each "pod" and the
real merge, driven with Pilot."""

from __future__ import annotations

import pytest
from testkit.k8s import RECORDED

from mldebug.cluster.front import ClusterPoller, ClusterSpec
from mldebug.cluster.k8s import K8sSpec
from mldebug.cluster.k8spods import parse_target
from mldebug.commands.attach import live_app
from mldebug.tui.widgets.findings_banner import FindingsBanner
from mldebug.tui.widgets.rank_table import RankTable

pytestmark = pytest.mark.multirank

SLOW_TIMER = 3600  # polls are asked for with the refresh key, never by the timer


def _spec(pod_job, recorded: str) -> ClusterSpec:
    target = K8sSpec(parse_target("pytorchjob/train", None), namespace="research")
    return ClusterSpec(deadline=60.0, k8s=target, env=pod_job.env(RECORDED / recorded))


def _rows(app) -> dict[str, str]:
    table = app.query_one(RankTable)
    return {
        str(table.get_row_at(i)[0]): str(table.get_row_at(i)[1]) for i in range(table.row_count)
    }


async def _first_look(app, pilot) -> None:
    for _ in range(600):  # the pods' collectors take seconds on a loaded machine
        await app.workers.wait_for_complete()
        await pilot.pause(0.1)
        if app.query_one(RankTable).row_count:
            return
    raise AssertionError("the pods were never read")


async def test_attach_k8s_shows_the_pods_ranks_and_the_verdict(pod_job):
    poller = ClusterPoller(_spec(pod_job, "pytorchjob-hung.json"))
    app = live_app(poller, interval=SLOW_TIMER, job_name="pytorchjob/train")
    async with app.run_test(size=(140, 40)) as pilot:
        await _first_look(app, pilot)
        assert _rows(app) == {"0": "stuck", "1": "stuck", "2": "stuck", "3": "stuck"}
        table = app.query_one(RankTable)
        cells = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        hosts = {row[0]: row for row in cells}
        assert "train-master-0" in hosts["1"] and "train-worker-0" in hosts["2"], cells
        banner = " ".join(str(app.query_one(FindingsBanner).render()).split())
        assert "rank 2 never reached all_reduce: it is stuck in load_shard" in banner
        await pilot.press("q")
    poller.close()


async def test_attach_k8s_shows_an_oomkilled_pod_as_the_crash(pod_job):
    poller = ClusterPoller(_spec(pod_job, "pytorchjob-oomkilled.json"))
    app = live_app(poller, interval=SLOW_TIMER, job_name="pytorchjob/train")
    async with app.run_test(size=(140, 40)) as pilot:
        await _first_look(app, pilot)
        assert _rows(app) == {"0": "stuck", "1": "stuck", "2": "exited 137", "3": "exited 137"}
        banner = " ".join(str(app.query_one(FindingsBanner).render()).split())
        assert "OOMKilled at its 32 GiB memory limit" in banner
    poller.close()
