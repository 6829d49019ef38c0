"""The `cxg` command line and the demo: the top floor.

Each command composes packages from every floor below (storage loads, the gateway and its
balancer, the region's processes and Spark, the load tests), so the command line lives above
them all and nothing below imports it (see docs/cli.md).

The public names below load their module on first use (`lazy_loader.attach`, PEP 562), like every
package's face; importing the package only sets the allocator's environment, which must be in
place before anything loads pyarrow.
"""

from __future__ import annotations

import os

import lazy_loader

from storage import ALLOCATOR_ENVIRONMENT

for _name, _value in ALLOCATOR_ENVIRONMENT.items():  # before anything loads pyarrow
    os.environ.setdefault(_name, _value)

_FACE: dict[str, tuple[str, ...]] = {
    "cli": ("build_parser", "main"),
}
__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs=_FACE)
