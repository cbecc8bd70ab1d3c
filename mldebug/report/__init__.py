"""Views for scripts and terminals: the text report and the --json document."""
