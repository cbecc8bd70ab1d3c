"""Helpers the test modules share: real jobs to start (`jobs`), a stand-in py-spy
(`pyspy_fakes`), synthetic snapshots for the TUI (`tui_fakes`), the one-node SLURM cluster
and loopback sshd (`cluster`, `slurm_cluster`, `ssh_server`), and the builders several
modules use (`builders`). A test module imports from here, never from another test module.
"""
