"""Rerun issue 10's hostile-document sweep against the ``hybridsag`` CLI of this checkout.

Usage::

    .venv/bin/python benchmarks/hostile_sweep.py [--timeout 60] [--keep]

Every case builds its own folder (three normal files beside the hostile item, so "the rest of
the batch" can be counted with ``hybridsag list --json``) and data dir in a temporary folder, then
runs ``hybridsag`` as a subprocess with a timeout: a hang shows as ``TIMEOUT`` (its process group
is killed). No model loads: ``HYBRIDSAG_EMBEDDING__MODEL=none`` switches the dense path off and
searches use ``--paths bm25``.

The table gives, per case: what was done, the exit code, the first line of stderr, whether the
three normal items were indexed (``rest``), wall seconds, the peak RSS of the child, and notes.
Peak RSS is the child's own ``ru_maxrss`` from ``os.wait4`` (the same accounting as
``resource.getrusage(RUSAGE_CHILDREN)``, which is a running maximum over all children and so
cannot tell one case from another). Children are forked, never vforked (``preexec_fn``): after a
vfork Linux counts the parent's peak RSS into the child's ``ru_maxrss``; after a fork only the
parent's RSS at that moment, which this script keeps small (big inputs are written in pieces).
The run ends with a list of findings: a timeout, a
traceback, a leaked sentinel secret, invalid UTF-8 on stdout, or a lost batch.

The ``http`` group starts a real ``hybridsag serve`` on a free 127.0.0.1 port (a token, no
model, ``server.header_timeout_s`` and ``server.body_timeout_s`` of 2 s) and speaks raw HTTP to
it (issue 23): Content-Length with Transfer-Encoding, a 400 MiB chunked body without a token
and one over the body limit with a token, 60 connections that never finish their headers, a
body shorter than its Content-Length, deep JSON (a 100,000-deep array, metadata 5,000 deep, a
deep NDJSON line, a deep search body) and content types (none, text/plain, upper-case JSON).
Its rows give the HTTP status (``CLOSED``: the server closed without answering) in ``rc``, the
answer's message in the stderr column, and the server's peak RSS (``VmHWM``, a running maximum)
after the case; the expected status is in the notes and a different one is a finding, as is a
traceback in the server's log.

This is a benchmark script, not a test: it prints and never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Case", "Run", "main", "run_cli"]

ROOT = Path(__file__).resolve().parent.parent
CLI = ROOT / ".venv" / "bin" / "hybridsag"
SENTINEL = "sk-SENTINEL-123"
NORMAL = ("alpha.txt", "beta.txt", "gamma.txt")
NORMAL_IDS = ("n1", "n2", "n3")
TIMEOUT_S = 60.0


@dataclass
class Run:
    """One finished (or killed) child: exit code or ``TIMEOUT``, its output, wall seconds and
    peak RSS in MiB."""

    rc: int | str
    stdout: bytes
    stderr: bytes
    wall_s: float
    rss_mib: float

    @property
    def first_err(self) -> str:
        lines = [ln for ln in self.stderr.decode("utf-8", "backslashreplace").splitlines() if ln]
        return lines[0] if lines else ""

    @property
    def traceback(self) -> bool:
        return b"Traceback (most recent call last)" in self.stderr

    @property
    def stdout_utf8(self) -> bool:
        try:
            self.stdout.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True


@dataclass
class Case:
    """A row of the table: the run that matters, what was done, extra notes, and ``rest``
    (normal items indexed / expected, or None where no batch is involved)."""

    name: str
    done: str
    run: Run
    rest: tuple[int, int] | None = None
    notes: list[str] = field(default_factory=list)
    #: an HTTP case's expected status (``rc`` is then the status the server answered)
    expect: int | None = None


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYBRIDSAG_")}
    env["HYBRIDSAG_EMBEDDING__MODEL"] = "none"
    env.update(extra or {})
    return env


def run_cli(
    args: Sequence[str | bytes],
    *,
    data_dir: Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = TIMEOUT_S,
) -> Run:
    """Run ``hybridsag --data-dir DATA_DIR ARGS`` in its own process group; kill the group after
    ``timeout`` seconds. ``args`` may hold bytes (arguments that are not UTF-8)."""
    argv: list[str | bytes] = [str(CLI), "--data-dir", str(data_dir), *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            argv, cwd=cwd, env=_env(env), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            preexec_fn=os.setsid,  # own process group; also forces fork over vfork (see above)
        )
        deadline = start + timeout
        rc: int | str = "TIMEOUT"
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.perf_counter() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                _, _, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - start
        proc.returncode = rc if isinstance(rc, int) else -9  # reaped here; Popen must not wait
        out.seek(0)
        err.seek(0)
        return Run(rc, out.read(), err.read(), wall, usage.ru_maxrss / 1024)


class Sweep:
    """Builds the case folders under ``base`` and runs them."""

    def __init__(self, base: Path, timeout: float) -> None:
        self.base = base
        self.timeout = timeout
        self.cases: list[Case] = []

    # ------------------------------------------------------------------ helpers

    def folder(self, name: str) -> tuple[Path, Path]:
        """A fresh folder holding the three normal files, and a data dir for it."""
        folder = self.base / name / "docs"
        folder.mkdir(parents=True)
        for i, fname in enumerate(NORMAL):
            (folder / fname).write_text(
                f"# Normal {i}\n\nThe normal file number {i} talks about lighthouses. "
                f"It has two sentences.\n",
                encoding="utf-8",
            )
        return folder, self.base / name / "data"

    def cli(self, args: Sequence[str | bytes], data: Path, env: dict[str, str] | None = None,
            timeout: float | None = None) -> Run:
        return run_cli(args, data_dir=data, cwd=data.parent, env=env,
                       timeout=self.timeout if timeout is None else timeout)

    def listed(self, data: Path) -> list[dict[str, object]]:
        run = self.cli(["list", "--json", "--limit", "100000"], data)
        if run.rc != 0:
            return []
        try:
            return json.loads(run.stdout)
        except ValueError:
            return []

    def rest(self, data: Path, ids: Sequence[str] = NORMAL) -> tuple[int, int]:
        have = {str(r["resource_id"]) for r in self.listed(data) if r.get("status") == "ready"}
        return sum(i in have for i in ids), len(ids)

    @staticmethod
    def report_notes(run: Run) -> list[str]:
        """The index report's errors (reason text, shortened) when stdout is its JSON."""
        try:
            rep = json.loads(run.stdout)
        except ValueError:
            return []
        if not isinstance(rep, dict):
            return []
        notes = [f"indexed={rep.get('indexed')} chunks={rep.get('chunks')}"]
        for where, why in list((rep.get("errors") or {}).items())[:2]:
            why = why if isinstance(why, str) else json.dumps(why)
            notes.append(f"error[{str(where)[-30:]}]: {why[:90]}")
        return notes

    def index_case(self, name: str, done: str, build: Callable[[Path], None],
                   env: dict[str, str] | None = None, timeout: float | None = None) -> Case:
        folder, data = self.folder(name)
        build(folder)
        run = self.cli(["index", "--json", "-q", str(folder)], data, env=env, timeout=timeout)
        case = Case(name, done, run, self.rest(data), self.report_notes(run))
        self.cases.append(case)
        return case

    def jsonl_case(self, name: str, done: str, hostile: str | bytes | Callable[[], Iterator[bytes]]
                   ) -> Case:
        folder = self.base / name
        folder.mkdir(parents=True)
        data = folder / "data"
        lines = [
            json.dumps({"_id": i, "title": f"Normal {i}", "text": f"Normal document {i} on ports."})
            .encode() for i in NORMAL_IDS
        ]
        path = folder / "corpus.jsonl"
        pieces = hostile() if callable(hostile) else iter([
            hostile.encode() if isinstance(hostile, str) else hostile])
        size = 0
        with open(path, "wb") as fh:
            fh.write(lines[0] + b"\n")
            for piece in pieces:
                size += fh.write(piece)
            fh.write(b"\n" + b"\n".join(lines[1:]) + b"\n")
        run = self.cli(["index", "--json", "-q", "--jsonl", str(path)], data)
        notes = [f"line={size:,} B", *self.report_notes(run)]
        case = Case(name, done, run, self.rest(data, NORMAL_IDS), notes)
        self.cases.append(case)
        return case

    def search_case(self, name: str, done: str, data: Path, args: Sequence[str | bytes],
                    env: dict[str, str] | None = None, rest: tuple[int, int] | None = None) -> Case:
        run = self.cli(["search", "--paths", "bm25", *args], data, env=env)
        notes = [f"stdout={len(run.stdout):,} B", f"utf8={'yes' if run.stdout_utf8 else 'NO'}"]
        try:
            res = json.loads(run.stdout)["results"]
            stale = sum(bool(r.get("stale")) for r in res)
            notes.append(f"results={len(res)} stale={stale}")
        except (ValueError, KeyError, TypeError):
            pass
        case = Case(name, done, run, rest, notes)
        self.cases.append(case)
        return case

    # ------------------------------------------------------------------ cases

    def fifo(self) -> None:
        folder, data = self.folder("fifo")
        (folder / "victim.txt").write_text("The zebra file talks about zebras.\n", "utf-8")
        self.cli(["index", "-q", str(folder)], data)
        (folder / "victim.txt").unlink()
        os.mkfifo(folder / "victim.txt")
        self.search_case("fifo-search", "index; victim.txt -> FIFO; search zebra",
                         data, ["--json", "zebra"])
        self.search_case("fifo-search-stale", "same, --include-stale",
                         data, ["--json", "--include-stale", "zebra"])
        run = self.cli(["index", "--json", "-q", str(folder)], data)
        self.cases.append(Case("fifo-reindex", "re-index the folder holding the FIFO", run,
                               self.rest(data), self.report_notes(run)))

    def symlinks(self) -> None:
        self.index_case("symlink-dev-zero", "zero.txt -> /dev/zero; index",
                        lambda f: (f / "zero.txt").symlink_to("/dev/zero"))
        case = self.index_case("symlink-passwd", "passwd.txt -> /etc/passwd; index",
                               lambda f: (f / "passwd.txt").symlink_to("/etc/passwd"))
        data = self.base / "symlink-passwd" / "data"
        hit = self.cli(["search", "--paths", "bm25", "--json", "root"], data)
        found = b"passwd" in hit.stdout
        case.notes.append(f"search 'root': passwd {'FOUND' if found else 'not found'}")

    def big_file(self) -> None:
        def sparse(f: Path) -> None:
            with open(f / "big.txt", "wb") as fh:
                fh.truncate(300 * 1024 * 1024)
        self.index_case("big-300mb", "sparse 300 MB big.txt (cap 64 MiB); index", sparse)
        # in place of an indexed file, then a search that hits it
        folder, data = self.folder("big-replace")
        (folder / "big.txt").write_text("The quokka file talks about quokkas.\n", "utf-8")
        self.cli(["index", "-q", str(folder)], data)
        (folder / "big.txt").unlink()
        sparse(folder)
        self.search_case("big-replace-search", "index; big.txt -> sparse 300 MB; search quokka",
                         data, ["--json", "--include-stale", "quokka"])

    def names(self) -> None:
        def bad_name(f: Path) -> None:
            with open(os.path.join(os.fsencode(f), b"bad\xff\xfename.txt"), "wb") as fh:
                fh.write(b"A file whose name is not UTF-8.\n")
        self.index_case("name-invalid-utf8", "file name b'bad\\xff\\xfename.txt'; index", bad_name)

        def cjk(f: Path) -> None:
            deep = f.joinpath(*(["文档目录层级结构说明" * 3] * 10))  # 10 x 90 B
            deep.mkdir(parents=True)
            (deep / "说明文件.txt").write_text("深层目录中的文件。这是第二句。\n", "utf-8")
        case = self.index_case("cjk-long-path", "10 folders x 30 CJK chars (~930 B id); index", cjk)
        case.notes.insert(0, "id ~930 B > 480 B cap")

    def jsonl(self) -> None:
        base = {"_id": "bad", "text": "A hostile document about harbours."}
        self.jsonl_case("jsonl-300-acl", "JSONL item with 300 ACL tags",
                        json.dumps({**base, "acl": [f"tag{i}" for i in range(300)]}))
        self.jsonl_case("jsonl-tenant-300b", "JSONL item with a 300-byte tenant",
                        json.dumps({**base, "tenant": "t" * 300}))
        self.jsonl_case("jsonl-surrogate-title", "JSONL title with \\ud800",
                        json.dumps({**base, "title": "bad \ud800 title"}))
        self.jsonl_case("jsonl-surrogate-meta", "JSONL metadata value with \\ud800",
                        json.dumps({**base, "metadata": {"k": "v\ud800"}}))
        nest = '{"a": ' * 3000 + "1" + "}" * 3000
        deep = '{"_id": "bad", "text": "deep", "metadata": ' + nest + "}"
        self.jsonl_case("jsonl-meta-deep-3000", "JSONL metadata nested 3,000 deep", deep)
        self.jsonl_case("jsonl-meta-20mb", "JSONL metadata value of 20 MB (cap 64 KiB)",
                        _big_meta_line)

    def gitignore(self) -> None:
        def build(f: Path) -> None:
            (f / ".gitignore").write_text("x*x*x*x*x*x*x*x*x*x*x*x*x*x*x*y\n", "utf-8")
            (f / ("x" * 200 + ".txt")).write_text("Many x in the name.\n", "utf-8")
        self.index_case("gitignore-redos", ".gitignore x*x*...*y + file 'x'*200; index", build)

    def million_lines(self) -> None:
        def build(f: Path) -> None:
            with open(f / "lines.txt", "w", encoding="utf-8") as fh:
                for i in range(1_000_000):
                    fh.write(f"entry {i} walrus value\n")
        case = self.index_case("million-lines", "1,000,000 short lines, no sentence ends; index",
                               build, timeout=max(self.timeout, 300))
        data = self.base / "million-lines" / "data"
        chunks = [r.get("chunks") for r in self.listed(data) if r["resource_id"] == "lines.txt"]
        case.notes.insert(0, f"lines.txt chunks={chunks[0] if chunks else '?'}")
        s = self.search_case("million-lines-search", "search walrus --json -k 10", data,
                             ["--json", "-k", "10", "walrus"])
        try:
            res = json.loads(s.run.stdout)["results"]
            longest = max(len(r.get("text", "")) for r in res) if res else 0
            s.notes.append(f"results={len(res)} longest text={longest:,} chars")
        except (ValueError, KeyError, TypeError):
            pass

    def no_break(self) -> None:
        """Issue 23: one 10 MB line with no sentence break (a period before a lowercase word
        ends nothing), which took the chunker quadratic time (13 minutes at 9.5 MB)."""
        def build(f: Path) -> None:
            unit = "lorem ipsum dolor sit amet. " * 1000
            with open(f / "nobreak.txt", "w", encoding="utf-8") as fh:
                for _ in range(10_000_000 // len(unit)):
                    fh.write(unit)
        case = self.index_case("no-break-10mb", "10 MB single line, no sentence break; index",
                               build, timeout=max(self.timeout, 300))
        data = self.base / "no-break-10mb" / "data"
        chunks = [r.get("chunks") for r in self.listed(data) if r["resource_id"] == "nobreak.txt"]
        case.notes.insert(0, f"nobreak.txt chunks={chunks[0] if chunks else '?'}")

    def bad_args(self) -> None:
        folder, data = self.folder("bad-args")
        self.cli(["index", "-q", str(folder)], data)
        rest = self.rest(data)
        self.search_case("query-invalid-utf8", "search --json b'light\\xff'", data,
                         ["--json", b"light\xff"], rest=rest)
        self.search_case("query-lone-surrogate", "search --json b'\\xed\\xa0\\x80' (U+D800)", data,
                         ["--json", b"\xed\xa0\x80lighthouses"], rest=rest)
        self.search_case("tenant-bad-bytes", "search --tenant b't\\xff' lighthouses", data,
                         ["--json", "--tenant", b"t\xff", "lighthouses"], rest=rest)
        self.search_case("acl-bad-bytes", "search --acl b'a\\xed\\xa0\\x80' lighthouses", data,
                         ["--json", "--acl", b"a\xed\xa0\x80", "lighthouses"], rest=rest)
        fresh = data.parent / "data-tenant"
        run = self.cli(["index", "--json", "-q", "--tenant", b"t\xff", str(folder)], fresh)
        done = "index --tenant b't\\xff' (fresh data dir)"
        self.cases.append(Case("index-tenant-bad-bytes", done, run, self.rest(fresh),
                               self.report_notes(run)))

    def secrets(self) -> None:
        folder, data = self.folder("secrets")
        env = {"HYBRIDSAG_JUDGE__JEV__API_KEY": SENTINEL,
               "HYBRIDSAG_CHUNKING__OVERLAP_CHARS": "600"}
        runs = [
            ("secret-search", "API key + overlap 600 (cross-field error); search x",
             ["search", "--paths", "bm25", "x"], env),
            ("secret-search-vvv", "same, -vvv (tracebacks on)",
             ["-vvv", "search", "--paths", "bm25", "x"], env),
            ("secret-doctor", "same; doctor --json", ["doctor", "--json"], env),
            ("secret-index", "same; index the folder", ["index", "-q", str(folder)], env),
        ]
        toml = self.base / "secrets" / "typo.toml"
        toml.write_text(f'[judge.jev]\napi_kye = "{SENTINEL}"\n', "utf-8")
        runs.append(("secret-toml-typo", "TOML [judge.jev] api_kye = sentinel; search x",
                     ["search", "--paths", "bm25", "x"], {"HYBRIDSAG_CONFIG": str(toml)}))
        env_ok = {"HYBRIDSAG_JUDGE__JEV__API_KEY": SENTINEL}
        runs.append(("secret-doctor-valid", "API key only (valid settings); doctor --json",
                     ["doctor", "--json"], env_ok))
        for name, done, args, extra in runs:
            run = self.cli(args, data, env=extra)
            leaked = SENTINEL.encode() in run.stdout + run.stderr
            files = [p for p in data.rglob("*")
                     if p.is_file() and SENTINEL.encode() in p.read_bytes()]
            notes = [f"sentinel in output: {'LEAKED' if leaked else 'no'}",
                     f"in data dir files: {len(files)}"]
            self.cases.append(Case(name, done, run, None, notes))


TOKEN = "sweep-admin-token-0123456789"
MIB = 1024 * 1024


class HttpSweep:
    """The raw-HTTP cases against one ``hybridsag serve`` (see the module docstring)."""

    def __init__(self, base: Path, timeout: float) -> None:
        self.base = base / "http"
        self.base.mkdir(parents=True)
        self.timeout = timeout
        self.cases: list[Case] = []
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self.log = self.base / "serve.log"
        env = _env({
            "HYBRIDSAG_SERVER__TOKEN": TOKEN, "HYBRIDSAG_SERVER__RECONCILER": "false",
            "HYBRIDSAG_SERVER__HEADER_TIMEOUT_S": "2", "HYBRIDSAG_SERVER__BODY_TIMEOUT_S": "2",
        })
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [str(CLI), "--data-dir", str(self.base / "data"), "serve", "--port", str(self.port)],
                cwd=self.base, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                preexec_fn=os.setsid,
            )
        deadline = time.monotonic() + max(self.timeout, 60)
        while self.request("GET", "/readyz", auth=False)[0] != 200:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"hybridsag serve did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)

    def close(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    # ------------------------------------------------------------------ plumbing

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)

    def rss_mib(self) -> float:
        """The server's peak RSS so far (``VmHWM``), MiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    @staticmethod
    def head(method: str, path: str, headers: Sequence[str], *, auth: bool = True) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
        if auth:
            lines.append(f"Authorization: Bearer {TOKEN}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def read_answer(self, sock: socket.socket) -> tuple[int | str, bytes]:
        """(status, body) of one response; ``CLOSED`` or ``TIMEOUT`` without one."""
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                piece = sock.recv(65536)
                if not piece:
                    return "CLOSED", data
                data += piece
            head, _, body = data.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(body) < length and (piece := sock.recv(65536)):
                body += piece
            return int(head.split()[1]), body
        except ConnectionResetError:
            return "CLOSED", data
        except TimeoutError:
            return "TIMEOUT", data

    def request(self, method: str, path: str, body: bytes = b"", headers: Sequence[str] = (),
                *, auth: bool = True) -> tuple[int | str, bytes]:
        try:
            with self.connect() as sock:
                length = [f"Content-Length: {len(body)}"] if body else []
                sock.sendall(self.head(method, path, [*headers, *length], auth=auth) + body)
                return self.read_answer(sock)
        except OSError:
            return "CLOSED", b""

    def add(self, name: str, done: str, status: int | str, body: bytes, started: float,
            expect: int, notes: Sequence[str] = ()) -> None:
        try:
            msg = json.loads(body)["detail"][0]["msg"]
        except (ValueError, KeyError, IndexError, TypeError):
            msg = body[:70].decode("utf-8", "backslashreplace")
        run = Run(status, body, str(msg).encode(), time.perf_counter() - started, self.rss_mib())
        self.cases.append(Case(name, done, run, None, [f"expect {expect}", *notes], expect))

    def stream(self, name: str, done: str, path: str, headers: Sequence[str], *, auth: bool,
               expect: int) -> None:
        """Headers, then 1 MiB chunks (up to 400) until the server answers or closes."""
        started = time.perf_counter()
        sent, status, body = 0, "TIMEOUT", b""
        piece = b"%x\r\n%s\r\n" % (MIB, b" " * MIB)
        with self.connect() as sock:
            try:
                sock.sendall(self.head("POST", path, [*headers, "Transfer-Encoding: chunked"],
                                       auth=auth))
                while sent < 400 * MIB and not select.select([sock], [], [], 0)[0]:
                    sock.sendall(piece)
                    sent += MIB
            except OSError:
                pass
            status, body = self.read_answer(sock)
        self.add(name, done, status, body, started, expect, [f"sent {sent / MIB:.0f} MiB"])

    # ------------------------------------------------------------------ cases

    def framing(self) -> None:
        self.stream("http-cl-te", "POST /v1/resources CL: 1 + TE: chunked, 1 MiB chunks",
                    "/v1/resources", ["Content-Type: application/json", "Content-Length: 1"],
                    auth=True, expect=400)
        self.stream("http-chunked-no-token", "POST /v1/search chunked, no token, 1 MiB chunks",
                    "/v1/search", ["Content-Type: application/json"], auth=False, expect=401)
        self.stream("http-chunked-over-limit", "POST /v1/resources chunked past 10 MiB, token",
                    "/v1/resources", ["Content-Type: application/json"], auth=True, expect=413)

    def slow(self) -> None:
        started = time.perf_counter()
        socks = [self.connect() for _ in range(60)]
        for sock in socks:
            sock.sendall(b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1")
        answers = [self.read_answer(sock)[0] for sock in socks]
        for sock in socks:
            sock.close()
        shut = sum(a != "TIMEOUT" for a in answers)
        status = answers[0] if len(set(answers)) == 1 else "/".join(sorted(map(str, set(answers))))
        self.add("http-slow-headers", "60 connections, headers never finished (timeout 2 s)",
                 status, b"", started, 408, [f"closed by the server: {shut}/60"])
        started = time.perf_counter()
        with self.connect() as sock:
            sock.sendall(self.head("POST", "/v1/search", ["Content-Type: application/json",
                                                          "Content-Length: 100"]) + b'{"query"')
            status, body = self.read_answer(sock)
        self.add("http-short-body", "Content-Length 100, 8 bytes sent (timeout 2 s)", status,
                 body, started, 408)

    def deep(self) -> None:
        json_type = ["Content-Type: application/json"]
        for name, done, path, body, kind in (
            ("http-deep-array", "'[' * 100000 + ']' * 100000 to /v1/resources", "/v1/resources",
             b"[" * 100_000 + b"]" * 100_000, json_type),
            ("http-deep-metadata", "metadata nested 5,000 deep", "/v1/resources",
             b'[{"_id": "d", "text": "t", "metadata": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001
             + b"]", json_type),
            ("http-deep-ndjson", "NDJSON line nested 5,000 deep", "/v1/resources",
             b'{"_id": "d", "text": "t", "m": ' + b"[" * 5000 + b"]" * 5000 + b"}",
             ["Content-Type: application/x-ndjson"]),
            ("http-deep-search", "search filters nested 100,000 deep", "/v1/search",
             b'{"query": "x", "filters": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", json_type),
        ):
            started = time.perf_counter()
            status, answer = self.request("POST", path, body, kind)
            self.add(name, done, status, answer, started, 422, [f"body {len(body):,} B"])

    def content_types(self) -> None:
        doc = json.dumps([{"_id": "ct", "text": "A document about content types."}]).encode()
        for name, done, headers, expect in (
            ("http-no-content-type", "POST /v1/resources, no Content-Type", [], 415),
            ("http-text-plain", "POST /v1/resources, text/plain", ["Content-Type: text/plain"], 415),
            ("http-upper-json", "POST /v1/resources, APPLICATION/JSON",
             ["Content-Type: APPLICATION/JSON"], 200),
        ):
            started = time.perf_counter()
            status, answer = self.request("POST", "/v1/resources", doc, headers)
            self.add(name, done, status, answer, started, expect)

    def run(self) -> list[Case]:
        try:
            for group in (self.framing, self.slow, self.deep, self.content_types):
                group()
        finally:
            self.close()
        log = self.log.read_bytes()
        if b"Traceback (most recent call last)" in log:
            self.cases[-1].notes.append("TRACEBACK in the server log")
        return self.cases


def _big_meta_line() -> Iterator[bytes]:
    """A JSONL line whose metadata value is 20 MiB, written 1 MiB at a time."""
    yield b'{"_id": "bad", "text": "A hostile document about harbours.", "metadata": {"k": "'
    for _ in range(20):
        yield b"v" * (1024 * 1024)
    yield b'"}}'


def _findings(cases: Sequence[Case]) -> list[str]:
    out = []
    for c in cases:
        if c.run.rc == "TIMEOUT":
            out.append(f"{c.name}: TIMEOUT (hang)")
        if c.run.traceback:
            out.append(f"{c.name}: traceback on stderr")
        if any("LEAKED" in n or "FOUND" in n for n in c.notes):
            bad = [n for n in c.notes if "LEAKED" in n or "FOUND" in n]
            out.append(f"{c.name}: " + "; ".join(bad))
        if not c.run.stdout_utf8:
            out.append(f"{c.name}: stdout is not valid UTF-8")
        if c.rest is not None and c.rest[0] < c.rest[1]:
            out.append(f"{c.name}: batch not indexed ({c.rest[0]}/{c.rest[1]} normal items),"
                       f" exit {c.run.rc}")
        if c.expect is not None:
            if c.run.rc != c.expect:
                out.append(f"{c.name}: HTTP {c.run.rc}, expected {c.expect}")
            if any("TRACEBACK" in n for n in c.notes):
                out.append(f"{c.name}: traceback in the server log")
        elif isinstance(c.run.rc, int) and c.run.rc not in (0, 2) and "doctor" not in c.name:
            out.append(f"{c.name}: exit {c.run.rc}")
    return out


def _table(cases: Sequence[Case]) -> str:
    head = ("case", "done", "rc", "stderr (first line)", "rest", "wall s", "RSS MiB", "notes")
    rows = [
        (c.name, c.done, str(c.run.rc), c.run.first_err[:70],
         "-" if c.rest is None else f"{c.rest[0]}/{c.rest[1]}",
         f"{c.run.wall_s:.2f}", f"{c.run.rss_mib:.0f}", "; ".join(c.notes))
        for c in cases
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
    lines = []
    for r in [head, *rows]:
        cells = " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=False))
        lines.append(cells + " | " + r[-1])
        if r is head:
            lines.append("-+-".join("-" * w for w in widths) + "-+-" + "-" * 5)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every case and print the table and the findings. Exit 0 always (a benchmark)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per CLI call")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument("--only", action="append", default=[], help="case group (repeat)")
    args = ap.parse_args(argv)
    if not CLI.exists():
        print(f"no CLI at {CLI}: run `make install` first", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="hostile-sweep-"))
    sweep = Sweep(base, args.timeout)
    groups = ["fifo", "symlinks", "big_file", "names", "jsonl", "gitignore", "million_lines",
              "no_break", "bad_args", "secrets", "http"]
    started = time.perf_counter()
    try:
        for g in groups:
            if args.only and g not in args.only:
                continue
            print(f"... {g}", file=sys.stderr, flush=True)
            if g == "http":
                sweep.cases.extend(HttpSweep(base, args.timeout).run())
            else:
                getattr(sweep, g)()
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(_table(sweep.cases))
    own_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kept = "" if args.keep else ", removed"
    print(f"\n{len(sweep.cases)} cases in {time.perf_counter() - started:.0f} s"
          f" (timeout {args.timeout:.0f} s per call; folder {base}{kept};"
          f" this script's own peak RSS {own_rss:.0f} MiB)")
    found = _findings(sweep.cases)
    print("\nfindings:" if found else "\nfindings: none")
    for f in found:
        print(f"  - {f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
