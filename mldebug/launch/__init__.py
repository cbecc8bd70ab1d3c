"""`mldebug run`'s machinery: environment, supervisor, output tailing, failure report.

Public entry points:
    Supervisor(LaunchSpec(...)).start() / .wait() / .stop()   (supervisor.py, spec.py)
    LineSplitter                                              (lines.py)
    collect_failures, format_report, describe_exit            (failures.py)
"""
