"""The packets between balancer, routers and nodes, and their wire format.

PerformSys had four packets (seed 004 §4.1): DataBaseInfoPacket (server -> balancer: what the
node holds), DbRequestPacket (balancer -> server: a query), DbAnswerPacket (server ->
balancer: its result) and ServerStatusPacket (server -> router/balancer: ready or refuse).
They are `Hello`, `Request`, `Answer` and `Status` here; `Started` (a query left the buffer for
a slot), `Release` (the coordinator finished a query that holds slots as a lease) and `Cancel`
are the additions a service with cancellation and multi-node queries needs, and `Drain` takes a
node out of rotation (or back into it) while what it runs goes on.

Each packet is one WebSocket binary message: a 4-byte big-endian header length, the header as
JSON (it names the packet's `type`), then an optional payload (an answer's Arrow IPC stream).
"""

from __future__ import annotations

import functools
import json
import struct
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import pyarrow as pa

from storage import stream_bytes

_LENGTH = struct.Struct(">I")


class PacketError(ValueError):
    code = "bad_packet"


@dataclass
class Packet:
    type: ClassVar[str]
    payload: bytes = field(default=b"", repr=False, kw_only=True)

    def header(self) -> dict[str, Any]:
        """The packet's fields as JSON values (payload aside); nested records as dicts."""
        body: dict[str, Any] = {"type": self.type}
        for name in _names(type(self)):
            body[name] = _plain(getattr(self, name))
        return body


@dataclass
class NodeInfo:
    """What one node holds and how many queries it runs at once (in `Hello` and `Status`)."""

    name: str
    backend: str  # native, mysql or simulation
    slots: int
    url: str = ""  # the native node's HTTP API (scans), empty otherwise
    tables: dict[str, int] = field(default_factory=dict)  # table -> rows


@dataclass
class Hello(Packet):
    """DataBaseInfoPacket: sent once when a node or router connects upstream."""

    type: ClassVar[str] = "hello"
    name: str
    role: str  # node or router
    nodes: list[NodeInfo] = field(default_factory=list)  # a node lists itself, a router its nodes


@dataclass
class NodeState:
    """One node's admission state: ready iff it is not draining and a slot is free or the buffer is
    empty."""

    ready: bool
    slots: int
    running: int = 0
    buffered: int = 0
    draining: bool = False  # it takes no new query; the running and buffered ones go on


@dataclass
class Status(Packet):
    """ServerStatusPacket: ready or refuse, sent on every change and after every request.

    `received` counts the requests this sender has been given on the link so far, so an
    upstream knows whether the status already accounts for what it sent last."""

    type: ClassVar[str] = "status"
    ready: bool
    received: int
    nodes: dict[str, NodeState] = field(default_factory=dict)


@dataclass
class Request(Packet):
    """DbRequestPacket: one query, by id. `node` pins it to one node (multi-node queries);
    `lease` asks the node to hold a slot until `Release` instead of executing anything."""

    type: ClassVar[str] = "request"
    id: int
    sql: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    tag: str = ""
    node: str = ""
    lease: bool = False


@dataclass
class Started(Packet):
    """A query took a slot on `node` (immediately, or when it left the buffer)."""

    type: ClassVar[str] = "started"
    id: int
    node: str


@dataclass
class Answer(Packet):
    """DbAnswerPacket: a query's end on `node`; the result as an Arrow IPC stream in the payload."""

    type: ClassVar[str] = "answer"
    id: int
    node: str
    ok: bool = True
    code: str = ""  # error code when not ok; "busy" means the node refused it (send it again)
    message: str = ""
    rows: int = 0
    seconds: float = 0.0  # time in the slot


@dataclass
class Release(Packet):
    type: ClassVar[str] = "release"
    id: int


@dataclass
class Cancel(Packet):
    type: ClassVar[str] = "cancel"
    id: int


@dataclass
class Drain(Packet):
    """Take `node` out of rotation (`on`) or back into it: drained, it refuses every new query."""

    type: ClassVar[str] = "drain"
    node: str
    on: bool = True


@functools.cache
def _names(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(kind) if f.name != "payload")


def _plain(value: Any) -> Any:
    if isinstance(value, (NodeInfo, NodeState)):
        return dict(vars(value))
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


PACKETS: dict[str, type[Packet]] = {
    p.type: p for p in (Hello, Status, Request, Started, Answer, Release, Cancel, Drain)
}


def encode(packet: Packet) -> bytes:
    header = json.dumps(packet.header(), separators=(",", ":")).encode()
    return _LENGTH.pack(len(header)) + header + packet.payload


def decode(message: bytes) -> Packet:
    """The packet in one binary message; PacketError when it is not one."""
    try:
        (length,) = _LENGTH.unpack_from(message)
        header = json.loads(message[4 : 4 + length])
        kind = PACKETS[header.pop("type")]
    except (struct.error, ValueError, KeyError, TypeError) as e:
        raise PacketError(f"not a packet: {e}") from None
    try:
        if kind is Hello:
            header["nodes"] = [NodeInfo(**n) for n in header.get("nodes", [])]
        elif kind is Status:
            header["nodes"] = {k: NodeState(**v) for k, v in header.get("nodes", {}).items()}
        known = {f.name for f in fields(kind)}
        packet = kind(**{k: v for k, v in header.items() if k in known})
    except TypeError as e:
        raise PacketError(f"malformed {kind.type} packet: {e}") from None
    packet.payload = bytes(message[4 + length :])
    return packet


def arrow_payload(table: pa.Table) -> bytes:
    """An answer's payload: the result as an Arrow IPC stream."""
    return stream_bytes(table)


def read_payload(payload: bytes) -> pa.Table:
    return pa.ipc.open_stream(payload).read_all()
