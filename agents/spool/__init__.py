"""The agent's disk spool: every batch on disk before it is sent (store), its file framing (frame), the
batches held back from sending (held), the per-file index (index) and the file-level writes (files)."""
