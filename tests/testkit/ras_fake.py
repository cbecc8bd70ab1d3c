"""A fake NCCL RAS endpoint for the tests, built from the protocol in NCCL's src/ras/
(client.cc and client_support.cc, 2.24-2.30): it reads newline-ended commands, answers
`CLIENT PROTOCOL n` with `SERVER PROTOCOL 2`, `TIMEOUT s` with `OK`, `SET FORMAT json` with
`OK` (or, as NCCL before 2.28.7, `ERROR: Unknown command ...`), and `STATUS` / `VERBOSE
STATUS` with its report, then closes the connection, as NCCL does. Other modes misbehave:
`stall` accepts and never answers, `garbage` answers bytes that are no protocol, `huge`
answers the handshake then streams without end, `drip` sends its answer a byte at a time.

`nccl_json(...)` writes a JSON report the way NCCL's json* writers print it (the 2.28.7-2.28.9
missing comma included when asked).
"""

from __future__ import annotations

import socket
import threading

OPS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")


def nccl_json(
    version: str,
    ranks: list[tuple[int, str, int, dict[str, int]]],
    missing: list[tuple[int, str, int]] = (),  # type: ignore[assignment]
    comm_hash: str = "5e1f7a3b2c9d0e81",
    comma_bug: bool = False,
) -> bytes:
    """One communicator: ranks (rank, host, pid, counts by op), missing (rank, host, pid)."""
    out = ["{\n", f'  "nccl_version": "{version}",\n', '  "cuda_runtime_version": 12080,\n']
    out += ['  "cuda_driver_version": 12080,\n', '  "timestamp": "2026-12-01 12:00:00",\n']
    out += ['  "communicators_count": 1,\n', '  "communicators": [\n', "    {\n"]
    out += [f'      "hash": "0x{comm_hash}",\n', '      "secondary_hash": "0x11:0x22",\n']
    out += [
        f'      "size": {len(ranks) + len(missing)},\n',
        f'      "ranks_count": {len(ranks)},\n',
    ]
    out += [f'      "missing_ranks_count": {len(missing)},\n', '      "ranks": [\n']
    for i, (rank, host, pid, counts) in enumerate(ranks):
        out.append(("" if i == 0 else ",\n") + "        {\n")
        out.append(f'          "rank": {rank},\n          "host": "{host}",\n')
        out.append(f'          "pid": {pid},\n          "cuda_dev": {rank},\n')
        out.append(f'          "nvml_dev": {rank},\n          "status": {{\n')
        out.append('            "init_state": 0,\n            "async_error": 0,\n')
        out.append('            "finalize_called": false,\n            "destroy_flag": false,\n')
        out.append('            "abort_flag": false\n          },\n')
        out.append('          "collective_counts": {\n')
        for j, op in enumerate(OPS):
            out.append(f'            "{op}": {counts.get(op, 0)}{"," if j < 4 else ""}\n')
        out.append("          }\n        }")
    out.append('\n      ],\n      "missing_ranks": [\n')
    for i, (rank, host, pid) in enumerate(missing):
        out.append(("" if i == 0 else ",\n") + "        {\n")
        out.append(f'          "rank": {rank},\n          "host": "{host}",\n')
        out.append(f'          "pid": {pid},\n          "cuda_dev": {rank},\n')
        out.append(f'          "nvml_dev": {rank}{"" if comma_bug else ","}\n')
        out.append('          "status": {\n            "unresponsive": true,\n')
        out.append('            "considered_dead": false\n          }\n        }')
    out.append('\n      ]\n    }\n  ],\n  "ras": {\n    "collection_time_sec": 0.003,\n')
    out.append('    "timeouts_count": 0\n  }\n}\n')
    return "".join(out).encode()


class FakeRas:
    """A RAS endpoint on 127.0.0.1 (a free port) in a thread; `answers` holds what STATUS
    returns per format ("json", "text"). Set `mode` to make it misbehave."""

    def __init__(self, mode: str = "answer", json_support: bool = True) -> None:
        self.mode = mode
        self.json_support = json_support
        self.answers: dict[str, bytes] = {}
        self.commands: list[str] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stopping.set()
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)

    def __enter__(self) -> FakeRas:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        try:
            if self.mode == "stall":
                self.stopping.wait(30)
                return
            if self.mode == "garbage":
                conn.sendall(b"\x00\xffHTTP/1.1 400 Bad Request\r\n\r\n" * 4)
                return
            fmt, buffer = "text", b""
            while True:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, _, buffer = buffer.partition(b"\n")
                    command = line.decode().strip()
                    self.commands.append(command)
                    upper = command.upper()
                    if upper.startswith("CLIENT PROTOCOL "):
                        conn.sendall(b"SERVER PROTOCOL 2\n")
                    elif upper.startswith("TIMEOUT "):
                        conn.sendall(b"OK\n")
                    elif upper.startswith("SET FORMAT ") and self.json_support:
                        fmt = command.split()[-1].lower()
                        conn.sendall(b"OK\n")
                    elif upper in ("STATUS", "VERBOSE STATUS"):
                        self._status(conn, fmt)
                        return
                    else:
                        conn.sendall(f"ERROR: Unknown command {command}\n".encode())
        except OSError:
            return
        finally:
            conn.close()

    def _status(self, conn: socket.socket, fmt: str) -> None:
        if self.mode == "huge":
            block = b"x" * (1 << 16)
            while not self.stopping.is_set():
                conn.sendall(block)
            return
        answer = self.answers.get(fmt) or self.answers.get("text", b"")
        if self.mode == "drip":
            for i in range(len(answer)):
                if self.stopping.wait(0.05):
                    return
                conn.sendall(answer[i : i + 1])
            return
        conn.sendall(answer)
