#!/usr/bin/python3
"""make_stats_fixture.py: known answers for math_sdpa/stats.h, from NumPy and SciPy.

    tools/make_stats_fixture.py [--out FILE]     write the fixture (default: the committed one)
    tools/make_stats_fixture.py --check [FILE]   recompute from the fixture's own samples and
                                                   compare: exit 0 fresh, 1 stale, 77 no NumPy/SciPy

Run with Debian's /usr/bin/python3 (python3-numpy, python3-scipy); the harness itself has no
Python. tests/test_stats.cpp reads the fixture and asserts that the C++ statistics match every
expected value to 1e-12 (relative to max(1, |expected|)).

What is computed here, and how independently of the C++ code:
  - percentiles and medians: numpy.percentile / numpy.median (linear interpolation between
    closest ranks, numpy's default, which stats.h promises to follow);
  - mean and sample standard deviation: numpy.mean, numpy.std(ddof=1), cross-checked against
    scipy.stats.tmean / tstd;
  - Hedges' g: Cohen's d from numpy's sample variances, times the small-sample correction
    J = 1 - 3 / (4 df - 1), df = n_a + n_b - 2 (Hedges and Olkin's approximation, the one stats.h
    documents); the exact J (a ratio of gamma functions, scipy.special) is recorded beside it;
  - the bootstrap intervals: the percentile bootstrap written out here from its definition, drawing
    the same resamples as the C++ code. That is possible honestly because the C++ code fixes its
    generator by definition: SplitMix64 (Steele, Lea and Flood 2014), an index in [0, n) as
    next() % n, n draws per resample, and for the ratio the a resample drawn before the b one.
    The SplitMix64 below is checked against the published reference outputs (seed 1234567, as on
    Rosetta Code) before anything is drawn. Everything after the draws (the medians of the
    resamples, the percentiles of those) is numpy's.
The statistical property the intervals must have (a 95% interval covers the truth about 95% of
the time) is tested separately in test_stats.cpp, without this fixture.
"""
import argparse
import json
import math
import os
import sys

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "stats_known_answers.json")
TOLERANCE = 1e-12
MASK64 = (1 << 64) - 1
# stats.h: kBootstrapResamples and kBootstrapSeed.
RESAMPLES = 2000
DEFAULT_SEED = 0x5D9A2026
PERCENTILES = [0, 2.5, 10, 25, 33.3, 50, 75, 90, 97.5, 100]


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def indices(self, n):
        return [self.next() % n for _ in range(n)]


def check_splitmix64():
    rng = SplitMix64(1234567)
    published = [6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431, 16408922859458223821]
    got = [rng.next() for _ in published]
    if got != published:
        sys.exit("make_stats_fixture.py: SplitMix64 does not give the published reference outputs: %s" % got)


def samples_of_record():
    """The data sets: small hand-made ones for the edge shapes (even and odd counts, ties,
    negative values, one and two values) and timing-like ones (log-normal, in ms, rounded to
    1e-4 ms), drawn once with numpy; the fixture keeps the numbers themselves."""
    import numpy as np

    rng = np.random.default_rng(20261124)
    timing = lambda n, median_ms, spread: [float(x) for x in np.round(median_ms * rng.lognormal(0.0, spread, n), 4)]
    return {
        "odd5": [5.0, 1.0, 4.0, 2.0, 3.0],
        "even4": [4.0, 1.0, 3.0, 2.0],
        "even8_ties": [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0],
        "mixed_signs6": [-3.5, 0.25, 0.001, -0.001, 7.125, 2.0],
        "one": [0.25],
        "two": [1.0, 3.0],
        "timing_even20": timing(20, 0.8, 0.15),
        "timing_odd31": timing(31, 0.8, 0.15),
        "timing_slower_even24": timing(24, 0.92, 0.2),
        "timing_long_tail_even40": timing(40, 2.5, 0.6),
    }


def percentile_interval(statistics, confidence):
    import numpy as np

    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(np.asarray(statistics), [tail, 100.0 - tail])
    return float(low), float(high)


def bootstrap_median_ci(x, confidence, seed, resamples):
    import numpy as np

    x = np.asarray(x)
    rng = SplitMix64(seed)
    medians = [float(np.median(x[rng.indices(len(x))])) for _ in range(resamples)]
    return percentile_interval(medians, confidence)


def median_ratio(b, a, confidence, seed, resamples):
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    rng = SplitMix64(seed)
    ratios = []
    for _ in range(resamples):
        draw_a = a[rng.indices(len(a))]
        draw_b = b[rng.indices(len(b))]
        ratios.append(float(np.median(draw_b) / np.median(draw_a)))
    return float(np.median(b) / np.median(a)), percentile_interval(ratios, confidence)


def hedges_g(a, b):
    import numpy as np
    from scipy import special

    na, nb = len(a), len(b)
    df = na + nb - 2
    a, b = np.asarray(a), np.asarray(b)
    # (n - 1) s^2 as the sum of squared deviations: 0 for one value, where numpy's var is NaN.
    pooled = math.sqrt((np.sum((a - a.mean()) ** 2) + np.sum((b - b.mean()) ** 2)) / df)
    d = (np.mean(b) - np.mean(a)) / pooled
    exact_j = math.exp(special.gammaln(df / 2) - special.gammaln((df - 1) / 2)) / math.sqrt(df / 2)
    return float(d * (1.0 - 3.0 / (4.0 * df - 1.0))), float(d * exact_j)


def expected_values(samples):
    import numpy as np
    from scipy import stats

    out = {"percentiles": [], "mean_sd": [], "hedges_g": [], "median_ci": [], "median_ratio": []}
    for name, x in samples.items():
        for q in PERCENTILES:
            out["percentiles"].append({"sample": name, "q": q, "expected": float(np.percentile(x, q))})
        out["percentiles"].append({"sample": name, "q": 50, "median": True, "expected": float(np.median(x))})
        mean = float(np.mean(x))
        sd = float(np.std(x, ddof=1)) if len(x) > 1 else 0.0
        if len(x) > 1:
            assert abs(sd - stats.tstd(x)) <= TOLERANCE * max(1.0, sd)
        assert abs(mean - stats.tmean(x)) <= TOLERANCE * max(1.0, abs(mean))
        out["mean_sd"].append({"sample": name, "mean": mean, "std_dev": sd})
    for a, b in [("odd5", "even4"), ("even8_ties", "mixed_signs6"), ("timing_even20", "timing_slower_even24"),
                 ("timing_slower_even24", "timing_even20"), ("timing_odd31", "timing_long_tail_even40"), ("one", "odd5")]:
        g, g_exact_j = hedges_g(samples[a], samples[b])
        out["hedges_g"].append({"a": a, "b": b, "expected": g, "with_exact_correction": g_exact_j})
    runs = [(name, 0.95, DEFAULT_SEED) for name in samples] + [
        ("timing_even20", 0.90, DEFAULT_SEED), ("timing_long_tail_even40", 0.99, 12345),
        ("timing_odd31", 0.95, 0xFFFFFFFFFFFFFFF1)]
    for name, confidence, seed in runs:
        low, high = bootstrap_median_ci(samples[name], confidence, seed, RESAMPLES)
        out["median_ci"].append({"sample": name, "confidence": confidence, "seed": seed, "resamples": RESAMPLES,
                                 "low": low, "high": high})
    for b, a, confidence, seed in [("timing_slower_even24", "timing_even20", 0.95, DEFAULT_SEED),
                                   ("timing_even20", "timing_odd31", 0.95, DEFAULT_SEED),
                                   ("timing_long_tail_even40", "timing_even20", 0.90, 777),
                                   ("even8_ties", "odd5", 0.95, DEFAULT_SEED)]:
        ratio, (low, high) = median_ratio(samples[b], samples[a], confidence, seed, RESAMPLES)
        out["median_ratio"].append({"b": b, "a": a, "confidence": confidence, "seed": seed, "resamples": RESAMPLES,
                                    "ratio": ratio, "low": low, "high": high})
    return out


def fixture(samples):
    import numpy
    import scipy

    doc = {
        "comment": "Known answers for math_sdpa/stats.h, written by tools/make_stats_fixture.py (NumPy %s, SciPy %s); "
                   "tests/test_stats.cpp checks every value to the tolerance, relative to max(1, |expected|). "
                   "Bootstrap draws: SplitMix64(seed), index next() %% n, n per resample, a before b for a ratio."
                   % (numpy.__version__, scipy.__version__),
        "tolerance": TOLERANCE,
        "samples": samples,
    }
    doc.update(expected_values(samples))
    return doc


def differences(committed, fresh, path=""):
    """Where two fixtures differ beyond the tolerance (numbers) or at all (anything else)."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        out = []
        for key in sorted(set(committed) | set(fresh)):
            if key == "comment":
                continue
            if key not in committed or key not in fresh:
                out.append("%s/%s: only in the %s fixture" % (path, key, "committed" if key in committed else "recomputed"))
            else:
                out += differences(committed[key], fresh[key], "%s/%s" % (path, key))
        return out
    if isinstance(committed, list) and isinstance(fresh, list):
        if len(committed) != len(fresh):
            return ["%s: %d entries committed, %d recomputed" % (path, len(committed), len(fresh))]
        return [d for i, (c, f) in enumerate(zip(committed, fresh)) for d in differences(c, f, "%s/%d" % (path, i))]
    if isinstance(committed, float) or isinstance(fresh, float):
        if isinstance(committed, (int, float)) and isinstance(fresh, (int, float)) and \
                abs(committed - fresh) <= TOLERANCE * max(1.0, abs(fresh)):
            return []
    elif committed == fresh:
        return []
    return ["%s: committed %r, recomputed %r" % (path, committed, fresh)]


def dump(doc):
    """JSON with one sample or one expected value per line: readable in a diff."""
    lines = []
    for key, value in doc.items():
        if isinstance(value, dict):
            body = ",\n".join("  %s: %s" % (json.dumps(k), json.dumps(v)) for k, v in value.items())
            lines.append(" %s: {\n%s\n }" % (json.dumps(key), body))
        elif isinstance(value, list):
            body = ",\n".join("  " + json.dumps(v) for v in value)
            lines.append(" %s: [\n%s\n ]" % (json.dumps(key), body))
        else:
            lines.append(" %s: %s" % (json.dumps(key), json.dumps(value)))
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=FIXTURE, help="where to write the fixture")
    parser.add_argument("--check", nargs="?", const=FIXTURE, metavar="FILE",
                        help="recompute FILE's expected values from its samples and compare (exit 1 if stale)")
    args = parser.parse_args()
    try:
        import numpy  # noqa: F401
        import scipy  # noqa: F401
    except ImportError as e:
        print("make_stats_fixture.py: skipped: %s (run it with /usr/bin/python3: python3-numpy, python3-scipy)" % e)
        return 77
    check_splitmix64()
    if args.check:
        with open(args.check) as f:
            committed = json.load(f)
        stale = differences(committed, fixture(committed["samples"]))
        for line in stale[:20]:
            print("stale: " + line)
        print("%s: %s" % (args.check, "stale (%d differences); rerun tools/make_stats_fixture.py" % len(stale)
                                        if stale else "fresh"))
        return 1 if stale else 0
    doc = fixture(samples_of_record())
    tmp = args.out + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write(dump(doc))
    os.replace(tmp, args.out)
    print("wrote %s: %d percentiles, %d mean/SD, %d Hedges' g, %d median intervals, %d ratios" % (
        args.out, len(doc["percentiles"]), len(doc["mean_sd"]), len(doc["hedges_g"]), len(doc["median_ci"]),
        len(doc["median_ratio"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
