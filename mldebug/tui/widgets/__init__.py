"""One widget per module; each draws part of a JobSnapshot or of the run directory."""
