"""Files in and out: the Go program's kv database and the NDJSON dump."""
