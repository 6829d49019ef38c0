"""SQL: parsing, the regular plan, and its execution on storage nodes and Spark."""
