"""The media types a result travels in, shared by the server, which negotiates them from
`Accept`, and its clients, which ask for them: a module of its own so that a client imports
nothing of the server."""

JSON = "application/json"
CSV = "text/csv"
ARROW = "application/vnd.apache.arrow.stream"
