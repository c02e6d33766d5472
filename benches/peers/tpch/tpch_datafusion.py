#!/usr/bin/env python3
"""DataFusion TPC-H peer benchmark.

python3 tpch_datafusion.py --data DIR --query Q1|Q3|Q5|Q6|Q10|Q18 [--runs N] [--warmup W]

DataFusion (Python bindings) with target_partitions=2. Each timed run builds a
fresh SessionContext, registers DIR/<table>.parquet and executes the query, so
all Parquet reading (schema/footers/statistics + data) is inside the timing and
no listing/statistics cache survives between runs.
"""
import os

import datafusion
from datafusion import SessionConfig, SessionContext

from tpch_common import SQL, TABLES, bench, emit, parse_args


def main():
    a = parse_args("datafusion").parse_args()
    data = os.path.abspath(a.data)

    def run():
        cfg = SessionConfig().with_target_partitions(2)
        ctx = SessionContext(cfg)
        for t in TABLES:
            ctx.register_parquet(t, os.path.join(data, f"{t}.parquet"))
        tbl = ctx.sql(SQL[a.query]).to_arrow_table()
        rows = list(zip(*[c.to_pylist() for c in tbl.columns])) if tbl.num_columns else []
        return tbl.column_names, rows

    res = bench(f"datafusion-{datafusion.__version__}", a.query, a.runs, a.warmup, run)
    emit(res, a.query, a.out, a.show)


if __name__ == "__main__":
    main()
