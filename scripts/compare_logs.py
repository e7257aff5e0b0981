#!/usr/bin/env python3
"""compare_logs.py: two sdpa-debug-format stage logs compared tag by tag; the first divergence named.

The sdpa-debug format (docs/LOG_FORMAT.md) is what `repro --log-format sdpa-debug` and
scripts/torch_stages.py write. Each log is reduced to its tag sequence ("SDPA_DEBUG SDPA_ENTRY",
"CUDA_EVENT math_qk_start", ...; lines of any other shape are left out), by default of its first
call (from the first SDPA_ENTRY to the first math_sdpa_complete), as tests/log_tags.h does:

    python3 scripts/compare_logs.py repro.log torch.log           # the first call's tags
    python3 scripts/compare_logs.py --all repro.log torch.log     # every tag of the logs
    python3 scripts/compare_logs.py --lines repro.log torch.log   # also each line, normalised
    python3 scripts/compare_logs.py --normalise repro.log         # a log's sdpa-debug lines, normalised

--lines compares the lines themselves once what differs between runs and programs is set aside:
[file:line] locations, timestamps, pointers and streams, durations, the values of --log values,
and the numbers in the scenario and fix notes. Exit 0: the same; 1: they differ (the first
divergence is printed with both lines, their line numbers and the stage each is a line of; a call
that stops early, as a hung one does, is named as such, with the stage it stopped in); 2: a file,
or the harness's stage table (asked of the repro binary: stage_table.py), cannot be read.
"""
import argparse
import re
import sys

import stage_table  # noqa: E402  (beside this script)

# ---------------------------------------------------------------------------------------- tags


def line_tag(line):
    """ "SDPA_DEBUG SDPA_ENTRY" for "[SDPA_DEBUG] [SDPA_ENTRY] ...", "CUDA_EVENT sdpa_entry" for
    "[CUDA_EVENT] sdpa_entry @ ..."; None for a line of neither shape."""
    if line.startswith("[CUDA_EVENT] "):
        return "CUDA_EVENT " + line[13:].split(" ", 1)[0]
    if len(line) < 4 or line[0] != "[":
        return None
    channel_end = line.find("] [")
    if channel_end < 0:
        return None
    tag_end = line.find("]", channel_end + 3)
    if tag_end < 0:
        return None
    return line[1:channel_end] + " " + line[channel_end + 3:tag_end]


def tagged_lines(text):
    """(line number, tag, line) for every line of the sdpa-debug format."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        tag = line_tag(line)
        if tag is not None:
            out.append((number, tag, line))
    return out


def first_call(tagged):
    """The entries of one call: from the first SDPA_ENTRY to the first math_sdpa_complete."""
    call, inside = [], False
    for entry in tagged:
        if entry[1] == "SDPA_DEBUG SDPA_ENTRY":
            inside = True
        if not inside:
            continue
        call.append(entry)
        if entry[1] == "CUDA_EVENT math_sdpa_complete":
            break
    return call


# ------------------------------------------------------------------------------------- stages
CHANNELS = {"sdpa": "SDPA_DEBUG", "alloc": "ALLOC_DEBUG", "cuda": "CUDA_DEBUG", "event": "CUDA_EVENT"}


def load_stage_tags(repro=None):
    """[(stage, the tags of its sdpa-debug lines, begin's then end's)] in the order of the harness's
    stage table (math_sdpa/stage.cpp, asked of `repro`: stage_table.py)."""
    rows = stage_table.load(repro)[0]["stages"]
    return [(row["name"], [line_tag("[%s] %s" % (CHANNELS[t["channel"]], t["text"]))
                           for t in row["debug_begin"] + row["debug_end"]]) for row in rows]


def line_stages(tagged, stage_tags):
    """{line number: the stage whose line it is} for the tagged lines of a log that a stage writes
    (not the notes, allocations and layers). Where several stages write the tag (a GEMM's
    [CUBLAS_GEMM_START]), it is the stage the line before it was in, if its lines go on with that
    tag, else the first that comes after that stage in the table's order (a new call: the first)."""
    where = {}  # tag -> [(the stage's place in the table, the line's place in the stage)]
    for i, (_, tags) in enumerate(stage_tags):
        for j, tag in enumerate(tags):
            where.setdefault(tag, []).append((i, j))
    out, at = {}, (-1, -1)
    for number, tag, _ in tagged:
        places = where.get(tag)
        if places:
            at = (min((p for p in places if p[0] == at[0] and p[1] > at[1]), default=None)
                  or min((p for p in places if p[0] > at[0]), default=None) or min(places))
            out[number] = stage_tags[at[0]][0]
    return out


# -------------------------------------------------------------------------------- normalising
_RULES = [
    (re.compile(r" \[[^\[\]]+:\d+\]$"), " [FILE:LINE]"),          # where the line was written
    (re.compile(r" @ \d+$"), " @ T"),                            # epoch microseconds
    (re.compile(r"\b0x[0-9a-fA-F]+\b|\(nil\)"), "P"),            # pointers, streams
    (re.compile(r"\bstream=0\b"), "stream=P"),                   # the legacy default stream
    (re.compile(r"\bduration_ms=\d+"), "duration_ms=D"),
    (re.compile(r"\b(min|max|sum)=\S+"), r"\1=V"),               # --log values: numerics differ
]
_NOTE = re.compile(r"^\[SDPA_DEBUG\] \[(SCENARIO|FIX)_\d\] ")
_NUMBER = re.compile(r"(?<![A-Za-z_])-?\d+(\.\d+)?(e[-+]?\d+)?")


def normalise(line):
    """The line without what differs between two runs of the same problem."""
    for pattern, replacement in _RULES:
        line = pattern.sub(replacement, line)
    if _NOTE.match(line):  # keep the note's tag, whose digit names the scenario or fix
        head, _, rest = line.partition("] ")
        tag, _, text = rest.partition("] ")
        line = head + "] " + tag + "] " + _NUMBER.sub("N", text)
    return line


# --------------------------------------------------------------------------------- comparing
def compare(a_text, b_text, whole=False, lines=False, stage_tags=()):
    """(same, report lines) for two logs; `stage_tags` (load_stage_tags) names each line's stage."""
    a, b = tagged_lines(a_text), tagged_lines(b_text)
    stages = [line_stages(a, stage_tags), line_stages(b, stage_tags)]
    if not whole:
        a, b = first_call(a), first_call(b)
    key = (lambda e: normalise(e[2])) if lines else (lambda e: e[1])

    def stage(e, log):
        return "stage " + stages[log][e[0]] if e[0] in stages[log] else "no stage's line"

    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b):
            short, name, other = (a, "A", b) if i >= len(a) else (b, "B", a)
            log = 0 if short is a else 1
            last = ("after tag #%d, %s (line %d, %s)" % (i, short[-1][1], short[-1][0], stage(short[-1], log))
                    if short else "before any tag")
            return False, ["first divergence at tag #%d: %s ends %s; the other goes on with %s (line %d, %s)" % (
                i + 1, name, last, other[i][1], other[i][0], stage(other[i], 1 - log)),
                "  a call that stops early is one that hung, failed or was cut short there"]
        if key(a[i]) != key(b[i]):
            return False, ["first divergence at tag #%d: line %d (%s) vs line %d (%s)" % (
                i + 1, a[i][0], stage(a[i], 0), b[i][0], stage(b[i], 1)),
                           "  A line %d: %s" % (a[i][0], a[i][2]),
                           "  B line %d: %s" % (b[i][0], b[i][2])]
    if not a:
        return False, ["no sdpa-debug-format call in either log (from [SDPA_ENTRY] to math_sdpa_complete)"]
    return True, ["same %s (%d tags)" % ("normalised lines" if lines else "tag sequence", len(a))]


def main(argv):
    ap = argparse.ArgumentParser(prog="compare_logs.py", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("a", help="a sdpa-debug-format log (e.g. repro's stderr)")
    ap.add_argument("b", nargs="?", help="another (e.g. torch_stages.py's stderr)")
    ap.add_argument("--all", action="store_true", help="every tag of the logs, not the first call's")
    ap.add_argument("--lines", action="store_true", help="compare the normalised lines, not only the tags")
    ap.add_argument("--normalise", action="store_true", help="print A's sdpa-debug-format lines, normalised")
    ap.add_argument("--repro", help="the repro binary whose stage table says which stage writes which tag (default: "
                    "$SDPA_REPRO, else the newest build*/repro, else repro on PATH)")
    args = ap.parse_args(argv)
    if (args.b is None) != args.normalise:
        ap.error("two logs to compare, or one with --normalise")
    try:
        stage_tags = load_stage_tags(args.repro)
    except (stage_table.StageTableError, KeyError, TypeError) as e:
        sys.stderr.write("compare_logs.py: error: the stage table: %s\n" % str(e).splitlines()[0])
        return 2
    texts = []
    for path in (args.a, args.b) if args.b else (args.a,):
        try:
            with open(path, errors="replace") as f:
                texts.append(f.read())
        except OSError as e:
            sys.stderr.write("compare_logs.py: error: %s: %s\n" % (path, e.strerror))
            return 2
    if args.normalise:
        print("\n".join(normalise(line) for _, _, line in tagged_lines(texts[0])))
        return 0
    same, report = compare(texts[0], texts[1], whole=args.all, lines=args.lines, stage_tags=stage_tags)
    print("\n".join(report))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
