import json

from mldebug import rundir
from mldebug.collect.crashes import read_crashes
from mldebug.model import RankCrash


def test_error_files_and_first_failure_ordered_by_time(tmp_path):
    paths = rundir.RunPaths(tmp_path)
    for rank, data in {
        0: {
            "type": "RuntimeError",
            "message": "peer closed",
            "time": 12.0,
            "location": "/lib/torch/x.py:5",
            "user_location": "/job.py:30",
        },
        2: {"type": "ValueError", "message": "bad", "time": 10.0, "location": "/job.py:9"},
        3: "{ not json",
    }.items():
        paths.rank_dir(rank).mkdir(parents=True)
        paths.error_file(rank).write_text(data if isinstance(data, str) else json.dumps(data))
    manifest = {"first_failure": {"rank": 1, "time": 11.0, "how": "killed (SIGKILL): OOM killer?"}}
    assert read_crashes(tmp_path, manifest) == (
        RankCrash(2, 10.0, "uncaught exception", "ValueError", "bad", "/job.py:9"),
        RankCrash(1, 11.0, "killed (SIGKILL): OOM killer?"),
        RankCrash(0, 12.0, "uncaught exception", "RuntimeError", "peer closed", "/job.py:30"),
    )


def test_garbage_is_skipped_not_raised(tmp_path):
    paths = rundir.RunPaths(tmp_path)
    paths.rank_dir(0).mkdir(parents=True)
    paths.error_file(0).write_text(json.dumps({"time": "soon"}))
    assert read_crashes(tmp_path, {"first_failure": {"rank": "one"}}) == ()
    assert read_crashes(tmp_path / "nowhere") == ()
