"""Shared bits for the peer TPC-H benchmark scripts (tpch_duckdb/datafusion/dask.py).

Queries use the TPC-H specification's *validation* substitution parameters
(spec 2.4.x.3 / Appendix "Qualification"):
  Q1  DELTA=90                       -> l_shipdate <= 1998-12-01 - 90 days = 1998-09-02
  Q3  SEGMENT=BUILDING, DATE=1995-03-15
  Q5  REGION=ASIA, DATE=1994-01-01   -> [1994-01-01, 1995-01-01)
  Q6  DATE=1994-01-01, DISCOUNT=0.06, QUANTITY=24
                                     -> l_discount between 0.05 and 0.07
  Q10 DATE=1993-10-01                -> [1993-10-01, 1994-01-01)
  Q18 QUANTITY=300

Derived literals (date +/- interval, DISCOUNT +/- 0.01) are written pre-computed.
This is deliberate: with DOUBLE columns, an engine that folds `0.06 + 0.01` in
binary floating point gets 0.06999999999999999 < 0.07 and silently drops every
l_discount = 0.07 row from Q6 (DataFusion parses decimal literals as Float64).
"""
import argparse
import csv
import statistics
import sys
import time

QUERIES = ["Q1", "Q3", "Q5", "Q6", "Q10", "Q18"]
TABLES = ["lineitem", "orders", "customer", "nation", "region", "part", "partsupp", "supplier"]

# Column names/order as in the TPC-H specification's answer sets.
COLUMNS = {
    "Q1": ["l_returnflag", "l_linestatus", "sum_qty", "sum_base_price", "sum_disc_price",
           "sum_charge", "avg_qty", "avg_price", "avg_disc", "count_order"],
    "Q3": ["l_orderkey", "revenue", "o_orderdate", "o_shippriority"],
    "Q5": ["n_name", "revenue"],
    "Q6": ["revenue"],
    "Q10": ["c_custkey", "c_name", "revenue", "c_acctbal", "n_name", "c_address", "c_phone",
            "c_comment"],
    "Q18": ["c_name", "c_custkey", "o_orderkey", "o_orderdate", "o_totalprice", "sum(l_quantity)"],
}

SQL = {
    "Q1": """
select
    l_returnflag,
    l_linestatus,
    sum(l_quantity) as sum_qty,
    sum(l_extendedprice) as sum_base_price,
    sum(l_extendedprice * (1 - l_discount)) as sum_disc_price,
    sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge,
    avg(l_quantity) as avg_qty,
    avg(l_extendedprice) as avg_price,
    avg(l_discount) as avg_disc,
    count(*) as count_order
from
    lineitem
where
    l_shipdate <= date '1998-09-02'
group by
    l_returnflag,
    l_linestatus
order by
    l_returnflag,
    l_linestatus
""",
    "Q3": """
select
    l_orderkey,
    sum(l_extendedprice * (1 - l_discount)) as revenue,
    o_orderdate,
    o_shippriority
from
    customer,
    orders,
    lineitem
where
    c_mktsegment = 'BUILDING'
    and c_custkey = o_custkey
    and l_orderkey = o_orderkey
    and o_orderdate < date '1995-03-15'
    and l_shipdate > date '1995-03-15'
group by
    l_orderkey,
    o_orderdate,
    o_shippriority
order by
    revenue desc,
    o_orderdate
limit 10
""",
    "Q5": """
select
    n_name,
    sum(l_extendedprice * (1 - l_discount)) as revenue
from
    customer,
    orders,
    lineitem,
    supplier,
    nation,
    region
where
    c_custkey = o_custkey
    and l_orderkey = o_orderkey
    and l_suppkey = s_suppkey
    and c_nationkey = s_nationkey
    and s_nationkey = n_nationkey
    and n_regionkey = r_regionkey
    and r_name = 'ASIA'
    and o_orderdate >= date '1994-01-01'
    and o_orderdate < date '1995-01-01'
group by
    n_name
order by
    revenue desc
""",
    "Q6": """
select
    sum(l_extendedprice * l_discount) as revenue
from
    lineitem
where
    l_shipdate >= date '1994-01-01'
    and l_shipdate < date '1995-01-01'
    and l_discount between 0.05 and 0.07
    and l_quantity < 24
""",
    "Q10": """
select
    c_custkey,
    c_name,
    sum(l_extendedprice * (1 - l_discount)) as revenue,
    c_acctbal,
    n_name,
    c_address,
    c_phone,
    c_comment
from
    customer,
    orders,
    lineitem,
    nation
where
    c_custkey = o_custkey
    and l_orderkey = o_orderkey
    and o_orderdate >= date '1993-10-01'
    and o_orderdate < date '1994-01-01'
    and l_returnflag = 'R'
    and c_nationkey = n_nationkey
group by
    c_custkey,
    c_name,
    c_acctbal,
    c_phone,
    n_name,
    c_address,
    c_comment
order by
    revenue desc
limit 20
""",
    "Q18": """
select
    c_name,
    c_custkey,
    o_orderkey,
    o_orderdate,
    o_totalprice,
    sum(l_quantity) as "sum(l_quantity)"
from
    customer,
    orders,
    lineitem
where
    o_orderkey in (
        select
            l_orderkey
        from
            lineitem
        group by
            l_orderkey
        having
            sum(l_quantity) > 300
    )
    and c_custkey = o_custkey
    and o_orderkey = l_orderkey
group by
    c_name,
    c_custkey,
    o_orderkey,
    o_orderdate,
    o_totalprice
order by
    o_totalprice desc,
    o_orderdate
limit 100
""",
}


def parse_args(engine):
    ap = argparse.ArgumentParser(description=f"TPC-H peer benchmark: {engine}")
    ap.add_argument("--data", required=True, help="dir with <table>.parquet files")
    ap.add_argument("--query", required=True, type=str.upper, choices=QUERIES)
    ap.add_argument("--runs", type=int, default=3, help="timed warm runs (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed warm-up runs (default 1)")
    ap.add_argument("--out", help="write the last run's result as CSV (spec column names)")
    ap.add_argument("--show", action="store_true", help="print the result")
    return ap


def bench(engine, query, runs, warmup, fn):
    """fn() runs the query end-to-end (incl. reading Parquet) and returns
    (column_names, list_of_row_tuples)."""
    res = None
    for i in range(warmup):
        t0 = time.perf_counter()
        res = fn()
        print(f"{engine} {query} warmup {i + 1}: {time.perf_counter() - t0:.3f} s", flush=True)
    times = []
    for i in range(runs):
        t0 = time.perf_counter()
        res = fn()
        dt = time.perf_counter() - t0
        times.append(dt)
        print(f"{engine} {query} run {i + 1}: {dt:.3f} s", flush=True)
    med = statistics.median(times) if times else float("nan")
    nrows = len(res[1]) if res else 0
    mn = min(times) if times else float("nan")
    print(f"RESULT engine={engine} query={query} median={med:.3f} min={mn:.3f} "
          f"runs={','.join(f'{t:.3f}' for t in times)} rows={nrows}", flush=True)
    return res


def emit(res, query, out=None, show=False):
    cols, rows = res
    if len(cols) != len(COLUMNS[query]):
        print(f"WARNING: {query} returned {len(cols)} columns", file=sys.stderr)
    if show:
        print(",".join(COLUMNS[query]))
        for r in rows:
            print(",".join(str(v) for v in r))
    if out:
        with open(out, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(COLUMNS[query])
            for r in rows:
                w.writerow(r)
