"""MySQL/MariaDB URLs as the loader and the `mysql` node backend both take them."""

from __future__ import annotations

from sqlalchemy.engine import make_url


def mysql_url(url: str) -> str:
    """Accept mysql://, mariadb:// or a full SQLAlchemy URL; use the PyMySQL driver."""
    parsed = make_url(url)
    if parsed.get_backend_name() not in ("mysql", "mariadb"):
        raise ValueError(f"not a MySQL/MariaDB URL: {url}")
    return parsed.set(drivername="mysql+pymysql").render_as_string(hide_password=False)
