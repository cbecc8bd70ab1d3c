"""Asking a live job's NCCL RAS endpoint what `ncclras` asks (NCCL 2.24+), bounded.

The exchange, from NCCL's `src/ras/client.cc` (protocol 2 in 2.24 to 2.30): the client sends
`CLIENT PROTOCOL 2\\n` and reads `SERVER PROTOCOL N\\n`; `TIMEOUT S\\n` (answered `OK\\n`)
bounds how long NCCL gathers from the other processes; `SET FORMAT json\\n` (2.28.7+,
answered `OK\\n`; older NCCL answers `ERROR: Unknown command ...`) asks for JSON; `STATUS\\n`
makes NCCL write its report and close the connection. All of it only reads the job's state.

The address is the ranks' `NCCL_RAS_ADDR` (read from /proc/<pid>/environ), else
localhost:28028; a rank with `NCCL_RAS_ENABLE=0` has none. Only addresses of this machine
are asked. Everything is bounded: about 2 s for all of it, 16 MiB of answer, 1 KB a line of
the handshake; a refused connection, a stall, garbage or a huge answer is one note.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass

from mldebug.files import procfs
from mldebug.ras.model import RasReport
from mldebug.ras.read import RasError, looks_like_ras, parse_ras
from mldebug.textsafe import one_line

DEFAULT_HOST = "localhost"
DEFAULT_PORT = 28028  # NCCL_RAS_CLIENT_PORT
PROTOCOL = 2  # NCCL_RAS_CLIENT_PROTOCOL
BUDGET_S = 2.0  # everything asked of RAS by one dump
MAX_ANSWER = 16 << 20
MAX_LINE = 1024
MAX_ADDRESSES = 4
GATHER_TIMEOUT_S = 1  # what NCCL may spend gathering from its peers (TIMEOUT, whole seconds)


MAX_CARRIED = 4 << 20  # an answer a node document carries to the front end


@dataclass(frozen=True)
class RasAsked:
    """What asking RAS gave: the report, or why there is none (one line each); and the
    answer as it came (`collect` carries it in the node document)."""

    report: RasReport | None
    notes: tuple[str, ...]
    data: bytes = b""
    source: str = ""  # host:port of the endpoint that answered


def _parse_addr(text: str) -> tuple[str, int] | None:
    """NCCL_RAS_ADDR: `host:port`, `[v6]:port` (NCCL's own parser takes these forms)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or len(host) > 255:
        return None
    return host, int(port)


def addresses_of(pids: Iterable[int]) -> list[tuple[str, int]]:
    """The RAS endpoints the ranks' environments name, the default where none is set."""
    found: list[tuple[str, int]] = []
    default = False
    for pid in pids:
        env = procfs.proc_environ(pid)
        if env is None:
            default = True  # another user's or gone: NCCL's default is the best guess
            continue
        if env.get("NCCL_RAS_ENABLE", "1").strip() == "0":
            continue
        addr = _parse_addr(env["NCCL_RAS_ADDR"]) if env.get("NCCL_RAS_ADDR") else None
        if addr is None:
            default = True
        elif addr not in found:
            found.append(addr)
    if default and (DEFAULT_HOST, DEFAULT_PORT) not in found:
        found.append((DEFAULT_HOST, DEFAULT_PORT))
    return found[:MAX_ADDRESSES]


def _local(host: str) -> bool:
    """Is `host` this machine (loopback, or one of the addresses its name resolves to)?
    The machine's own name is resolved only for an address that is not loopback: a slow
    DNS then costs only the dumps of jobs that named such an address."""
    try:
        found = {str(i[4][0]).split("%")[0] for i in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    if found and all(ipaddress.ip_address(a).is_loopback for a in found):
        return True
    try:
        mine = {str(i[4][0]) for i in socket.getaddrinfo(socket.gethostname(), None)}
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(a).is_loopback or a in mine for a in found)


class _Conn:
    """A socket whose every read and write ends by one deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline, self.buffer = sock, deadline, b""

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left

    def send(self, text: str) -> None:
        self.sock.settimeout(self._left())
        self.sock.sendall(text.encode())

    def line(self) -> str:
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_LINE:
                raise ValueError("a handshake line over 1 KB")
            self.sock.settimeout(self._left())
            chunk = self.sock.recv(MAX_LINE)
            if not chunk:
                raise ConnectionError("it closed the connection")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode("utf-8", "replace")

    def rest(self) -> tuple[bytes, bool]:
        """Everything until NCCL closes the connection; and whether it was cut at the cap."""
        parts, size = [self.buffer], len(self.buffer)
        while size <= MAX_ANSWER:
            self.sock.settimeout(self._left())
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return b"".join(parts), False
            parts.append(chunk)
            size += len(chunk)
        return b"".join(parts)[:MAX_ANSWER], True


def ask(host: str, port: int, deadline: float) -> tuple[bytes | None, str]:
    """One RAS endpoint's STATUS answer (JSON where NCCL has it), or None and why."""
    where = f"{host}:{port}"
    try:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, f"{where}: no time left to ask"
        sock = socket.create_connection((host, port), timeout=left)
    except ConnectionRefusedError:
        return None, f"{where}: nothing listens (NCCL older than 2.24, RAS off, or no NCCL job)"
    except OSError as error:
        return None, f"{where}: cannot connect ({one_line(str(error))[:120]})"
    try:
        conn = _Conn(sock, deadline)
        conn.send(f"CLIENT PROTOCOL {PROTOCOL}\n")
        hello = conn.line()
        if not hello.upper().startswith("SERVER PROTOCOL "):
            return None, f"{where}: not NCCL's RAS (it said {one_line(hello)[:60]!r})"
        conn.send(f"TIMEOUT {GATHER_TIMEOUT_S}\n")
        if conn.line().strip().upper() != "OK":
            return None, f"{where}: NCCL's RAS refused the TIMEOUT command"
        conn.send("SET FORMAT json\n")
        conn.line()  # OK, or "ERROR: Unknown command" before 2.28.7: the text form then
        conn.send("STATUS\n")
        data, cut = conn.rest()
    except TimeoutError:
        return None, f"{where}: no answer within the {BUDGET_S:g} s allowed"
    except (OSError, ValueError) as error:
        return None, f"{where}: {one_line(str(error))[:120] or type(error).__name__}"
    finally:
        sock.close()
    if cut:
        return None, f"{where}: its answer passed {MAX_ANSWER >> 20} MiB; not read"
    return data, ""


def ask_ras(pids: Iterable[int], budget: float = BUDGET_S) -> RasAsked:
    """Ask the ranks' RAS endpoint(s) on this machine; the first readable answer is kept
    (every process of a job answers for the whole job)."""
    deadline = time.monotonic() + budget
    notes: list[str] = []
    for host, port in addresses_of(pids):
        if not _local(host):
            notes.append(f"RAS {host}:{port}: not an address of this machine; not asked")
            continue
        data, why = ask(host, port, deadline)
        if data is None:
            notes.append(f"RAS {why}")
            continue
        if not looks_like_ras(data[:4096]):
            notes.append(f"RAS {host}:{port}: the answer is not a RAS report")
            continue
        try:
            report = parse_ras(data, f"{host}:{port}")
            return RasAsked(report, tuple(notes), data, f"{host}:{port}")
        except RasError as error:
            notes.append(f"RAS {one_line(str(error))}")
    return RasAsked(None, tuple(notes))


# ---- Carried by a node document (`mldebug collect`), read by the front end -------------


def carried(asked: RasAsked) -> dict | None:
    """The answer as a node document holds it: where it came from and its text, as RAS
    wrote it (the front end reads it with the same checked reader). None without one."""
    if asked.report is None or len(asked.data) > MAX_CARRIED:
        return None
    return {"source": asked.source, "text": asked.data.decode("utf-8", "replace")}


def read_carried(value: object, host: str) -> tuple[str, str] | None:
    """(source, text) of what a node document carried, when it has that shape and size."""
    if not isinstance(value, dict):
        return None
    source, text = value.get("source"), value.get("text")
    if not isinstance(source, str) or not isinstance(text, str) or len(text) > MAX_CARRIED:
        return None
    return f"{one_line(host)[:100]} {one_line(source)[:100]}", text


def quiet_notes(notes: Iterable[str]) -> tuple[str, ...]:
    """Nothing at NCCL's default address is not news (a job without NCCL 2.24+ is the usual
    case); an address the ranks named is."""
    return tuple(n for n in notes if f":{DEFAULT_PORT}: nothing listens" not in n)
