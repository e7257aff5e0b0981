"""stage_table.py: the harness's stage table (math_sdpa/stage.cpp) for the scripts that read it
(compare_logs.py, scenario_table.py; torch_stages.py reads the one its plan carries).

No copy of it is kept beside the scripts: it is asked of the binary (`repro help stages --json`),
the one given (a script's --repro, or $SDPA_REPRO), else the newest build's under the source tree
(build*/repro), else `repro` on PATH.
"""
import glob
import json
import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMAT = 1  # the table's format these scripts read


class StageTableError(Exception):
    """Why the table could not be had, one line."""


def find_repro(given=None):
    """The repro binary to ask: `given`, $SDPA_REPRO, the newest build*/repro, `repro` on PATH."""
    if given:
        return given
    if os.environ.get("SDPA_REPRO"):
        return os.environ["SDPA_REPRO"]
    built = [p for p in glob.glob(os.path.join(ROOT, "build*", "repro")) if os.path.isfile(p) and os.access(p, os.X_OK)]
    if built:
        return max(built, key=os.path.getmtime)
    on_path = shutil.which("repro")
    if on_path:
        return on_path
    raise StageTableError("no repro binary to ask for the stage table: build it (cmake --preset ci && cmake --build "
                          "--preset ci) or name it (--repro FILE, or SDPA_REPRO)")


def checked(table, where):
    """`table` (the JSON `repro help stages --json` prints), its format checked; `where` names it in errors."""
    if not isinstance(table, dict) or table.get("format") != FORMAT or not isinstance(table.get("stages"), list):
        raise StageTableError("%s: not a stage table of format %d" % (where, FORMAT))
    return table


def load(repro=None):
    """(the stage table, the command it came from)."""
    binary = find_repro(repro)
    command = "%s help stages --json" % binary
    try:
        out = subprocess.run([binary, "help", "stages", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             check=True).stdout
        return checked(json.loads(out), command), command
    except OSError as e:
        raise StageTableError("%s: %s" % (command, e.strerror))
    except subprocess.CalledProcessError as e:
        raise StageTableError("%s: exit %d: %s" % (command, e.returncode, e.stderr.decode(errors="replace").strip()[:200]))
    except ValueError as e:
        raise StageTableError("%s: not JSON: %s" % (command, str(e).splitlines()[0]))
