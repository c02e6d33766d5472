#!/usr/bin/env python3
"""DuckDB TPC-H peer benchmark.

python3 tpch_duckdb.py --data DIR --query Q1|Q3|Q5|Q6|Q10|Q18 [--runs N] [--warmup W]

DuckDB with threads=2. Each timed run creates views over DIR/<table>.parquet and
executes the query, so all Parquet reading (footer + data) is inside the timing.
No DuckDB object/metadata cache is enabled (defaults).
"""
import os

import duckdb

from tpch_common import SQL, TABLES, bench, emit, parse_args


def main():
    a = parse_args("duckdb").parse_args()
    con = duckdb.connect()  # in-memory
    con.execute("SET threads = 2")
    data = os.path.abspath(a.data)

    def run():
        for t in TABLES:
            p = os.path.join(data, f"{t}.parquet").replace("'", "''")
            con.execute(f"CREATE OR REPLACE VIEW {t} AS SELECT * FROM read_parquet('{p}')")
        cur = con.execute(SQL[a.query])
        rows = cur.fetchall()
        return [d[0] for d in cur.description], rows

    res = bench(f"duckdb-{duckdb.__version__}", a.query, a.runs, a.warmup, run)
    emit(res, a.query, a.out, a.show)


if __name__ == "__main__":
    main()
