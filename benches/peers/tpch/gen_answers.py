#!/usr/bin/env python3
"""Reference answers for Q1,Q3,Q5,Q6,Q10,Q18 computed by DuckDB.

python3 gen_answers.py --data /work/data/tpch/sf0.01-tpchgen --out answers/sf0.01

Input should be the tpchgen-cli files (DECIMAL(15,2) money columns), so all sums
are computed exactly in DECIMAL arithmetic. Writes:
  OUT/q1.csv ... OUT/q18.csv      spec answer-set format (see README "answers")
  OUT/raw/q1.csv ...              unrounded values (exact decimals as DuckDB
                                  prints them, doubles as shortest round-trip repr)
Format (both): RFC 4180 CSV, ',' separator, '\\n' line ends, header row with the
spec's column names, quoting only where needed (c_comment/c_address may contain
commas). Dates YYYY-MM-DD. Integers (keys, counts, o_shippriority) plain.
In the main files every non-integer number (DECIMAL sums/prices, avg_*, revenue)
is rounded half-up to exactly 2 decimals ("37734107.00").
"""
import argparse
import csv
import datetime as dt
import os
from decimal import ROUND_HALF_UP, Decimal

import duckdb

from tpch_common import COLUMNS, QUERIES, SQL, TABLES


def fmt(v, rounded):
    if isinstance(v, bool):
        raise TypeError(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, Decimal):
        return str(v.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)) if rounded else str(v)
    if isinstance(v, float):
        if rounded:
            return str(Decimal(repr(v)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))
        return repr(v)
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, str):
        return v
    raise TypeError(f"{type(v)}: {v!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(os.path.join(a.out, "raw"), exist_ok=True)
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute("SET enable_progress_bar = false")
    data = os.path.abspath(a.data)
    for t in TABLES:
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{data}/{t}.parquet')")
    for q in QUERIES:
        cur = con.execute(SQL[q])
        types = [str(d[1]) for d in cur.description]
        rows = cur.fetchall()
        assert len(cur.description) == len(COLUMNS[q])
        for sub, rounded in (("", True), ("raw", False)):
            with open(os.path.join(a.out, sub, f"{q.lower()}.csv"), "w", newline="") as f:
                w = csv.writer(f, lineterminator="\n")
                w.writerow(COLUMNS[q])
                for r in rows:
                    w.writerow([fmt(v, rounded) for v in r])
        print(f"{q}: {len(rows)} rows; result types {types}")

    # Sanity: Q1 averages are DOUBLE in DuckDB; check rounding them equals rounding
    # the exact quotient sum/count (guards against a .xx5 boundary case).
    exact = con.execute("""
        select sum(l_quantity), sum(l_extendedprice), sum(l_discount), count(*)
        from lineitem where l_shipdate <= date '1998-09-02'
        group by l_returnflag, l_linestatus order by l_returnflag, l_linestatus""").fetchall()
    with open(os.path.join(a.out, "q1.csv"), newline="") as f:
        body = list(csv.reader(f))[1:]
    for (sq, sp, sd, n), row in zip(exact, body):
        want = [str((Decimal(x) / Decimal(n)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))
                for x in (sq, sp, sd)]
        assert want == row[6:9], (want, row)
    print("Q1 avg rounding check OK")


if __name__ == "__main__":
    main()
