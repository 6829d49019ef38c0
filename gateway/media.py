"""The media types a result travels in, shared by the server, which negotiates them from
`Accept`, and its clients, which ask for them: a module of its own so that a client imports
nothing of the server. JSON and the Arrow stream are the names the storage nodes' protocol uses too."""

from storage import ARROW_STREAM as ARROW
from storage import JSON

CSV = "text/csv"

__all__ = ["ARROW", "CSV", "JSON"]
