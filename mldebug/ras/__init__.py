"""NCCL RAS: its report's model, the reader of its text and JSON forms, and the
verdict of its launch counts judged with the stacks."""
