"""A stand-in for another user's local SuperLink: an HTTP server on a loopback port that answers
`/health` (as a SuperLink does, so `flwr run .` would take it for one) and writes every request
it gets to a log. Run as the user `nobody` where the tests run as root and a system Python that
user may execute exists; else as the tests' own user (`uid` then says so)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

SERVER = """
import http.server, sys
log = open(sys.argv[2], "a")
class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self):
        log.write(self.command + " " + self.path + "\\n"); log.flush()
        self.send_response(200 if self.path == "/health" else 404); self.end_headers()
    do_GET = do_POST = do_PUT = answer
    def log_message(self, *args): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""
NOBODY = 65534


def _python_for_nobody() -> str | None:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate):
            ok = subprocess.run([candidate, "-c", "pass"], user=NOBODY, capture_output=True)
            if ok.returncode == 0:
                return candidate
    return None


@contextmanager
def other_users_superlink(port: int):
    """(process, log of the requests it got, its uid) while it listens on `port`."""
    python, user = sys.executable, None
    if os.geteuid() == 0:
        python, user = _python_for_nobody() or sys.executable, NOBODY
        if python == sys.executable:
            user = None
    folder = Path(tempfile.mkdtemp(prefix="other-user-"))  # outside root's private tmp folders
    folder.chmod(0o777)
    log = folder / "requests.log"
    proc = subprocess.Popen([python, "-c", SERVER, str(port), str(log)], user=user,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                    break
            except (urllib.error.URLError, OSError):
                assert proc.poll() is None and time.monotonic() < deadline, "stand-in down"
                time.sleep(0.2)
        log.write_text("")  # the check above is the test's own
        yield proc, log, NOBODY if user is not None else os.getuid()
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
