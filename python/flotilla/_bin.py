"""Finding and running Flotilla's programs.

A program is looked up in FLOTILLA_BINDIR (a build tree, or an install
elsewhere), then in the bindir `make install` wrote into _paths.py, then on
PATH.  Errors of the programs are their logger's "E" lines (or
flotilla-run's "flotilla-run: " lines): those become the exception's
message."""
import os
import re
import shutil
import subprocess

from ._errors import FlotillaError

try:
    from ._paths import BINDIR
except ImportError:  # the source tree: no generated _paths.py
    BINDIR = None

_ERROR_LINE = re.compile(r"^\S+ E (.*)$")
# flotilla-run's own lines that say why a job ended
_RUN_LINE = re.compile(r"^flotilla-run: (.*(?:stopping the job|job failed|cannot).*)$")


def find(name):
    """The path of program `name` (flotilla-trainer, flotilla-run), or
    FlotillaError naming the places looked in."""
    dirs = [d for d in (os.environ.get("FLOTILLA_BINDIR"), BINDIR) if d]
    for d in dirs:
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    p = shutil.which(name)
    if p:
        return p
    looked = ", ".join(dirs + ["PATH"])
    raise FlotillaError(f"{name} not found (looked in {looked}); install Flotilla "
                        f"(make install) or set FLOTILLA_BINDIR to the directory holding it")


def error_lines(output):
    """The error lines of a program's output (its logger's E lines and
    flotilla-run's verdicts), each once, in order."""
    errs = []
    for line in output.splitlines():
        m = _ERROR_LINE.match(line) or _RUN_LINE.match(line)
        if m and m.group(1) not in errs:
            errs.append(m.group(1))
    return errs


def error_message(output, fallback_lines=15):
    """What a failed program said: its error lines, else the end of its output."""
    errs = error_lines(output)
    return "\n".join(errs or output.splitlines()[-fallback_lines:])


def check_output(args, timeout):
    """Run args to the end; (returncode, stdout and stderr together)."""
    try:
        r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        out = (e.output or b"").decode("utf-8", "replace")
        raise FlotillaError(f"{args[0]} did not finish within {timeout} s", out) from None
    return r.returncode, r.stdout.decode("utf-8", "replace")
