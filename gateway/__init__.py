"""The SQL-over-HTTP gateway in front of one region, and its Python clients.

The public face is a set of modules, imported by name and never here, so that a client
(`from gateway import dbapi`) loads neither the HTTP server nor Spark nor the kernels:

- `dbapi`: the DB-API 2.0 driver (`dbapi.connect(url)`);
- `sqlalchemy_dialect`: `create_engine("cxg://host:port")`;
- `client`: the small HTTP client both of them use;
- `server`: `Gateway`, the composition root of the service;
- `config`: its configuration.
"""

__all__ = ["client", "config", "dbapi", "server", "sqlalchemy_dialect"]
