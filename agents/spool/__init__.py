"""The agent's disk spool: every batch on disk before it is sent (store), its file framing (frame), the
batches held back from sending (held) and the per-file index (index)."""
