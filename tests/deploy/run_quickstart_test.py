#!/usr/bin/python3
"""`make run` and scripts/run-quickstart.sh: they start, and Ctrl-C stops them with exit 0.

The quickstart's demo backends use fixed ports (examples/quickstart: 18001-18003);
the proxy, admin and gRPC ports are taken from free ports here. Each TestCase class
is one ctest test (argument: the class name).
"""
import os
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def children_of(pid):
    result = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    result.append(int(entry))
                    result += children_of(int(entry))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    return result


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


if __name__ == "__main__":
    unittest.main()
