"""Beyond one machine: `mldebug collect` on every node (through srun, ssh or pdsh), and the
nodes' documents merged into one job (docs/multi-node.md)."""
