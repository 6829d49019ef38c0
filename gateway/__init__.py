"""The SQL-over-HTTP gateway and the `cxg` command line."""
