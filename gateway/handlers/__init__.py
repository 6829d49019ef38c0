"""The gateway's HTTP handlers, one module per resource: statements, the region (tables and
cluster) and the service itself (health, metrics, the OpenAPI document). Each module's
`routes()` lists its endpoints; the gateway's composition root only puts them together."""
