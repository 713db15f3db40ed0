"""Agent batches into the store: the group-commit queue, the batch bookkeeping, the row writers and the
launch assignment."""
