"""The media types a result travels in, shared by the server, which negotiates them from
`Accept`, and its clients, which ask for them: a module of its own so that a client imports
nothing of the server. JSON and the Arrow stream are the names the storage nodes' protocol uses too."""

from storage import ARROW_STREAM as ARROW
from storage import JSON

CSV = "text/csv"
NDJSON = "application/x-ndjson"  # an append's rows as JSON lines
EVENT_STREAM = "text/event-stream"  # a standing query's changes as Server-Sent Events

__all__ = ["ARROW", "CSV", "EVENT_STREAM", "JSON", "NDJSON"]
