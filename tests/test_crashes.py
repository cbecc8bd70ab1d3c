import json

from mldebug.collect.crashes import read_crashes
from mldebug.files import rundir
from mldebug.model import RankCrash


def test_the_launchers_first_failure_leads_then_error_files_by_time(tmp_path):
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
    # The launcher saw rank 1 killed: its first failure leads even though the files' times
    # say otherwise (it is seen dead only after the peers' errors about it).
    first = {"rank": 1, "time": 11.0, "how": "aborted (SIGABRT)", "recipe": "native-crash"}
    assert read_crashes(tmp_path, {"first_failure": first}) == (
        RankCrash(1, 11.0, "aborted (SIGABRT)", recipe="native-crash"),
        RankCrash(2, 10.0, "uncaught exception", "ValueError", "bad", "/job.py:9"),
        RankCrash(0, 12.0, "uncaught exception", "RuntimeError", "peer closed", "/job.py:30"),
    )
    hostile = {**first, "recipe": "../../etc/passwd\x1b[31m"}
    assert read_crashes(tmp_path, {"first_failure": hostile})[0].recipe == ""


def test_garbage_is_skipped_not_raised(tmp_path):
    paths = rundir.RunPaths(tmp_path)
    paths.rank_dir(0).mkdir(parents=True)
    paths.error_file(0).write_text(json.dumps({"time": "soon"}))
    assert read_crashes(tmp_path, {"first_failure": {"rank": "one"}}) == ()
    assert read_crashes(tmp_path / "nowhere") == ()
