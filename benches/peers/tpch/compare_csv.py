#!/usr/bin/env python3
"""Compare a query result CSV with a reference answer CSV.

python3 compare_csv.py EXPECTED.csv ACTUAL.csv [--abs 0.01] [--rel 1e-9] [--ignore-cols a,b]

Headers must match exactly; rows are compared in order (the answers are in the
spec's ORDER BY). Cells that parse as numbers on both sides match if
|a-b| <= max(abs_tol, rel_tol*max(|a|,|b|)); the default abs tolerance of 0.01
covers the reference files' rounding to 2 decimals (for the rounded columns a
correct result is within 0.005). Other cells must match as strings.
Exit code 0 = match, 1 = mismatch.
"""
import argparse
import csv
import sys


def num(s):
    try:
        return float(s)
    except ValueError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("expected")
    ap.add_argument("actual")
    ap.add_argument("--abs", type=float, default=0.01)
    ap.add_argument("--rel", type=float, default=1e-9)
    ap.add_argument("--ignore-cols", default="",
                    help="comma-separated columns to skip, e.g. c_address,c_comment when "
                         "comparing DuckDB-dbgen data against tpchgen-based answers")
    a = ap.parse_args()
    with open(a.expected, newline="") as f:
        exp = list(csv.reader(f))
    with open(a.actual, newline="") as f:
        act = list(csv.reader(f))
    errs = []
    ign = set(filter(None, a.ignore_cols.split(",")))
    if exp[0] != act[0]:
        errs.append(f"header: expected {exp[0]} got {act[0]}")
    if len(exp) != len(act):
        errs.append(f"row count: expected {len(exp) - 1} got {len(act) - 1}")
    for i, (re_, ra) in enumerate(zip(exp[1:], act[1:]), 1):
        if len(re_) != len(ra):
            errs.append(f"row {i}: width {len(re_)} vs {len(ra)}")
            continue
        for j, (x, y) in enumerate(zip(re_, ra)):
            if exp[0][j] in ign:
                continue
            nx, ny = num(x), num(y)
            if nx is not None and ny is not None:
                if abs(nx - ny) > max(a.abs, a.rel * max(abs(nx), abs(ny))):
                    errs.append(f"row {i} col {exp[0][j]}: expected {x} got {y}")
            elif x != y:
                errs.append(f"row {i} col {exp[0][j]}: expected {x!r} got {y!r}")
    if errs:
        print(f"MISMATCH {a.actual} vs {a.expected}:")
        for e in errs[:20]:
            print("  " + e)
        sys.exit(1)
    print(f"OK {a.actual} ({len(act) - 1} rows)")


if __name__ == "__main__":
    main()
