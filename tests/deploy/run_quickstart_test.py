#!/usr/bin/python3
"""`make run` and scripts/run-quickstart.sh: they start, Ctrl-C stops them with exit 0,
and every command the quickstart prints as a hint works.

The quickstart's demo backends use fixed ports (examples/quickstart: 18001-18003);
the proxy, admin and gRPC ports are taken from free ports here. Each TestCase class
is one ctest test (argument: the class name).
"""
import os
import sys
import pty
import select
import signal
import socket
import subprocess
import time
import unittest

SOURCE_DIR = os.environ.get(
    "KWD_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BINARY_DIR = os.environ.get("KWD_BINARY_DIR", os.path.join(SOURCE_DIR, "build"))
RUNNING = b"kwd quickstart is running"


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from ports import free_port  # noqa: E402  (below the ephemeral range: no port races)


def quickstart_env():
    env = dict(os.environ)
    for name in ("KWD_LISTEN", "KWD_ADMIN", "KWD_CONTROLLER_ADMIN", "KWD_GRPC_LISTEN"):
        env[name] = f"127.0.0.1:{free_port()}"
    env.pop("KWD_QUICKSTART_JOB", None)
    return env


def read_until(fd, marker, deadline, output):
    while marker not in output and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
    return output


def processes_alive(pids):
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] != "Z":
                    alive.append(pid)
        except (ProcessLookupError, FileNotFoundError):
            pass
    return alive


def process_stats():
    """(pid, fields of /proc/PID/stat after the command name) of every process:
    fields[0] state, [1] ppid, [2] pgrp, [3] session."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    yield int(entry), f.read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass


def children_of(pid):
    result = []
    for child, fields in process_stats():
        if int(fields[1]) == pid:
            result.append(child)
            result += children_of(child)
    return result


def start_quickstart(env=None, stdin=subprocess.DEVNULL):
    """scripts/run-quickstart.sh in a session of its own; returns (process, output so far)."""
    process = subprocess.Popen([os.path.join(SOURCE_DIR, "scripts", "run-quickstart.sh"),
                                BINARY_DIR], cwd=SOURCE_DIR, env=env or quickstart_env(),
                               stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    return process


def stop_and_check(test, process, output, started, exit_zero=True):
    """SIGINT to the process group (what a terminal's Ctrl-C does): exit 0 (unless
    `exit_zero` is false: make dies of the signal itself), "stopped", and no process
    of the quickstart left, within bounded time."""
    os.killpg(process.pid, signal.SIGINT)
    try:
        rest, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        kill_session(process)
        test.fail("still running 30 s after SIGINT: " + output.decode(errors="replace"))
    text = (output + rest).decode(errors="replace")
    if exit_zero:
        test.assertEqual(process.returncode, 0, text)
    test.assertIn(b"stopped", rest, text)
    test.assertNotIn(b"a process exited", rest)
    deadline = time.monotonic() + 10
    while processes_alive(started) and time.monotonic() < deadline:
        time.sleep(0.1)
    test.assertEqual(processes_alive(started), [], text)


def kill_session(process):
    """SIGKILL to every process of the quickstart's session, whatever its process group."""
    for pid in session_processes(process.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def session_processes(sid):
    """Every process of session `sid` (the quickstart and what it started)."""
    return [pid for pid, fields in process_stats() if int(fields[3]) == sid and fields[0] != "Z"]


class RunScript(unittest.TestCase):
    """The script without a terminal: SIGINT (as Ctrl-C sends it) stops it with exit 0."""

    def test_sigint_stops_everything_with_exit_zero(self):
        process = subprocess.Popen([os.path.join(SOURCE_DIR, "scripts", "run-quickstart.sh"),
                                    BINARY_DIR], cwd=SOURCE_DIR, env=quickstart_env(),
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        output = read_until(process.stdout.fileno(), RUNNING, time.monotonic() + 60, b"")
        self.assertIn(RUNNING, output, output.decode(errors="replace"))
        started = children_of(process.pid)
        self.assertGreaterEqual(len(started), 5, "3 backends, a controller and a proxy")
        os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        rest, _ = process.communicate(timeout=30)
        self.assertEqual(process.returncode, 0, (output + rest).decode(errors="replace"))
        self.assertIn(b"stopped", rest)
        self.assertNotIn(b"a process exited", rest)
        deadline = time.monotonic() + 10
        while processes_alive(started) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(processes_alive(started), [])


class MakeRun(unittest.TestCase):
    """`make run` on a terminal (a pty): Ctrl-C makes make exit 0 too."""

    def test_ctrl_c_exits_zero(self):
        env = quickstart_env()
        env["MAKEFLAGS"] = ""
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(SOURCE_DIR)
            os.execvpe("make", ["make", "-s", "run", f"BUILD_DIR={BINARY_DIR}"], env)
        output = b""
        try:
            output = read_until(fd, RUNNING, time.monotonic() + 240, output)
            self.assertIn(RUNNING, output, output.decode(errors="replace"))
            os.write(fd, b"\x03")  # Ctrl-C
            output = read_until(fd, b"\x00never", time.monotonic() + 30, output)
        finally:
            _, status = os.waitpid(pid, 0)
            os.close(fd)
        text = output.decode(errors="replace")
        self.assertTrue(os.WIFEXITED(status), text)
        self.assertEqual(os.WEXITSTATUS(status), 0, text)
        self.assertIn("stopped", text)
        self.assertNotIn("Interrupt", text)


class EarlySignal(unittest.TestCase):
    """SIGINT while the quickstart is still starting (between starting a process and
    noting it, during the waits): everything stops, nothing is left running.
    Before the fix a signal right after a backend started left that backend out of
    the cleanup, which then waited for it forever."""

    def test_sigint_during_start(self):
        # The window (a process started, its pid not yet noted) is short: try
        # every 4 ms of the start-up.
        for delay in [i * 0.004 for i in range(60)]:
            with self.subTest(delay=delay):
                process = start_quickstart()
                time.sleep(delay)
                started = session_processes(process.pid)
                os.killpg(process.pid, signal.SIGINT)
                try:
                    output, _ = process.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    kill_session(process)
                    self.fail(f"still running 30 s after SIGINT at {delay:.3f} s")
                # 0, or killed by the SIGINT itself when it came before bash had set
                # its traps (then nothing had been started yet).
                self.assertIn(process.returncode, (0, -signal.SIGINT),
                              output.decode(errors="replace"))
                deadline = time.monotonic() + 10
                while session_processes(process.pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
                self.assertEqual(session_processes(process.pid), [], started)


class TerminalOnStdinOnly(unittest.TestCase):
    """A terminal on stdin, but the output goes to a pipe or there is no controlling
    terminal (setsid, CI runners, `make run 2>log`): the script must not move the
    quickstart into a process group of its own, where a SIGINT to the caller's group
    never reaches it. Before the fix it did: the quickstart kept running after the
    SIGINT (and make, without a controlling terminal, died leaving it behind)."""

    def run_on_pty(self, command, script_exit_zero):
        master, slave = pty.openpty()
        env = quickstart_env()
        env["MAKEFLAGS"] = ""
        try:
            process = subprocess.Popen(command, cwd=SOURCE_DIR, env=env, stdin=slave,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        finally:
            os.close(slave)
        try:
            output = read_until(process.stdout.fileno(), RUNNING, time.monotonic() + 240, b"")
            self.assertIn(RUNNING, output, output.decode(errors="replace"))
            started = session_processes(process.pid)
            self.assertGreaterEqual(len(started), 6, "the script, 3 backends, controller, proxy")
            stop_and_check(self, process, output, started, exit_zero=script_exit_zero)
            self.assertEqual(session_processes(process.pid), [])
        finally:
            os.close(master)

    def test_script_with_output_to_a_pipe(self):
        # bash, a session leader with a terminal on stdin, makes it its controlling
        # terminal; its stderr is a pipe, so job control cannot hand the terminal over.
        self.run_on_pty([os.path.join(SOURCE_DIR, "scripts", "run-quickstart.sh"), BINARY_DIR],
                        script_exit_zero=True)

    def test_make_run_without_a_controlling_terminal(self):
        # make, the session leader, takes no controlling terminal. It dies of the
        # SIGINT itself (GNU make re-raises it); the quickstart must stop with it.
        self.run_on_pty(["make", "-s", "run", f"BUILD_DIR={BINARY_DIR}"], script_exit_zero=False)


def hint_commands(output):
    """The commands the quickstart prints under "Try:" (comment lines left out)."""
    text = output.decode(errors="replace")
    block = text.split("\nTry:\n", 1)[1].split("\nEdit ", 1)[0]
    return [line.strip() for line in block.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def run_hint(command):
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=SOURCE_DIR,
                            stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    return result.returncode, result.stdout.decode(errors="replace") + result.stderr.decode(
        errors="replace")


class Hints(unittest.TestCase):
    """Every hint the quickstart prints runs, for examples/quickstart and for
    examples/sapsystem, and shows what its comment says. Before the fix the
    sapsystem hints named a group and rules that example does not have, and the
    secure-URL hint had no command."""

    def run_example(self, examples, checks):
        env = quickstart_env()
        env["KWD_EXAMPLES"] = examples
        process = start_quickstart(env)
        output = read_until(process.stdout.fileno(), RUNNING, time.monotonic() + 60, b"")
        output = read_until(process.stdout.fileno(), b"Ctrl-C stops everything.",
                            time.monotonic() + 10, output)
        started = children_of(process.pid)
        try:
            self.assertIn(RUNNING, output, output.decode(errors="replace"))
            commands = hint_commands(output)
            self.assertGreaterEqual(len(commands), 6, commands)
            # What each command must show: the first command holding a check's needle.
            wanted = {}
            for needle, expected in checks:
                matching = [c for c in commands if needle in c]
                if matching:
                    wanted.setdefault(matching[0], []).extend(expected)
            results = {}
            for command in commands:
                # The proxy may not have applied the snapshot with the servers yet
                # (with a message server, the controller's first poll may still be
                # on its way): a command is retried until it shows what it should,
                # for at most 10 s. A retry on any output at all accepted a loop
                # whose first requests were answered 503 (one X-Served-By line).
                deadline = time.monotonic() + 10
                while True:
                    status, text = run_hint(command)
                    shows = all(want in text for want in wanted.get(command, []))
                    if (status == 0 and text.strip() and shows) or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
                with self.subTest(command=command):
                    self.assertEqual(status, 0, text)
                    self.assertTrue(text.strip(), "prints nothing")
                results[command] = text
            for needle, expected in checks:
                matching = [c for c in results if needle in c]
                self.assertTrue(matching, f"no hint with {needle!r}: {list(results)}")
                for want in expected:
                    self.assertIn(want, results[matching[0]], matching[0])
        finally:
            stop_and_check(self, process, output, started)

    def test_quickstart(self):
        self.run_example("examples/quickstart", [
            ("for i in", ["X-Served-By: demo1_QS_00", "X-Served-By: demo2_QS_01"]),
            ("sap-contextid=", ["X-Served-By: demo2_QS_01"]),
            ("/index.html", ["X-Served-By: demo3_QS_02"]),
            ("/sap/x.cgi", [" 403 ", "X-Kwd-Error: EPERM"]),
            ("/sap/bc/gui/secure/x", [" 403 ", "X-Kwd-Error: EPERM"]),
            ("explain --snapshot", ['"group":"default/public"']),
        ])

    def test_sapsystem(self):
        self.run_example("examples/sapsystem", [
            ("for i in", ["X-Served-By: demo1_QS_00", "X-Served-By: demo2_QS_01"]),
            ("/index.html", ["X-Served-By: demo3_QS_02"]),
            ("kwd_controller_sapsystem_", ['kwd_controller_sapsystem_servers{sapsystem="default/qs"} 3']),
            ("explain --snapshot", ['"group":"default/diag"']),
        ])


if __name__ == "__main__":
    unittest.main()
