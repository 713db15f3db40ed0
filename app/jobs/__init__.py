"""The periodic jobs and where they run: the runner (background), the leader lease, partitions, retention,
rollups, and the jobs process that runs them apart from the HTTP server."""
