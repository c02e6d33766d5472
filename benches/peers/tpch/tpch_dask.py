#!/usr/bin/env python3
"""Dask TPC-H peer benchmark.

python3 tpch_dask.py --data DIR --query Q1|Q3|Q5|Q6|Q10|Q18 [--runs N] [--warmup W]
                     [--blocksize 32MiB]

A distributed LocalCluster of 2 worker processes x 1 thread is started before
(outside) the timing. Each timed run builds the dask.dataframe graph from
dd.read_parquet(DIR/<table>.parquet) and calls .compute(), so Parquet reading is
inside the timing. Queries are hand-written dataframe programs equivalent to the
SQL in tpch_common.py (same validation parameters).

--blocksize: dd.read_parquet splits a single big file into partitions of about
this (in-memory) size; with the default (256MiB) SF1 lineitem is ONE partition and
only one worker does any work, so we default to 32MiB (lineitem -> 13 partitions).
DECIMAL columns (e.g. tpchgen-cli files) are cast to float64 after reading.
"""
import datetime as dt
import os

import dask
import dask.dataframe as dd
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from dask.distributed import Client, LocalCluster

from tpch_common import COLUMNS, bench, emit, parse_args

D = dt.date


def make_reader(data, blocksize):
    decimal_cols = {}

    def read(table, columns):
        path = os.path.join(data, f"{table}.parquet")
        if table not in decimal_cols:  # footer read, inside the timing on first use
            sch = pq.read_schema(path)
            decimal_cols[table] = {f.name for f in sch if pa.types.is_decimal(f.type)}
        df = dd.read_parquet(path, columns=columns, blocksize=blocksize)
        dec = [c for c in columns if c in decimal_cols[table]]
        if dec:
            df = df.astype({c: "float64" for c in dec})
        return df

    return read


def q1(read):
    li = read("lineitem", ["l_quantity", "l_extendedprice", "l_discount", "l_tax",
                           "l_returnflag", "l_linestatus", "l_shipdate"])
    li = li[li.l_shipdate <= D(1998, 9, 2)]
    li = li.assign(disc_price=li.l_extendedprice * (1 - li.l_discount))
    li = li.assign(charge=li.disc_price * (1 + li.l_tax))
    g = li.groupby(["l_returnflag", "l_linestatus"]).agg(
        sum_qty=("l_quantity", "sum"),
        sum_base_price=("l_extendedprice", "sum"),
        sum_disc_price=("disc_price", "sum"),
        sum_charge=("charge", "sum"),
        avg_qty=("l_quantity", "mean"),
        avg_price=("l_extendedprice", "mean"),
        avg_disc=("l_discount", "mean"),
        count_order=("l_quantity", "count"),
    )
    r = g.compute().reset_index()
    return r.sort_values(["l_returnflag", "l_linestatus"])


def q3(read):
    c = read("customer", ["c_custkey", "c_mktsegment"])
    c = c[c.c_mktsegment == "BUILDING"][["c_custkey"]]
    o = read("orders", ["o_orderkey", "o_custkey", "o_orderdate", "o_shippriority"])
    o = o[o.o_orderdate < D(1995, 3, 15)]
    li = read("lineitem", ["l_orderkey", "l_extendedprice", "l_discount", "l_shipdate"])
    li = li[li.l_shipdate > D(1995, 3, 15)]
    co = c.merge(o, left_on="c_custkey", right_on="o_custkey")
    j = li.merge(co, left_on="l_orderkey", right_on="o_orderkey")
    j = j.assign(revenue=j.l_extendedprice * (1 - j.l_discount))
    g = j.groupby(["l_orderkey", "o_orderdate", "o_shippriority"]).revenue.sum()
    r = g.compute().reset_index()
    r = r.sort_values(["revenue", "o_orderdate"], ascending=[False, True]).head(10)
    return r


def q5(read):
    rg = read("region", ["r_regionkey", "r_name"])
    rg = rg[rg.r_name == "ASIA"]
    n = read("nation", ["n_nationkey", "n_name", "n_regionkey"])
    s = read("supplier", ["s_suppkey", "s_nationkey"])
    c = read("customer", ["c_custkey", "c_nationkey"])
    o = read("orders", ["o_orderkey", "o_custkey", "o_orderdate"])
    o = o[(o.o_orderdate >= D(1994, 1, 1)) & (o.o_orderdate < D(1995, 1, 1))]
    li = read("lineitem", ["l_orderkey", "l_suppkey", "l_extendedprice", "l_discount"])
    ns = rg.merge(n, left_on="r_regionkey", right_on="n_regionkey").merge(
        s, left_on="n_nationkey", right_on="s_nationkey")
    co = c.merge(o, left_on="c_custkey", right_on="o_custkey")
    j = li.merge(co, left_on="l_orderkey", right_on="o_orderkey")
    j = j.merge(ns, left_on=["l_suppkey", "c_nationkey"], right_on=["s_suppkey", "s_nationkey"])
    j = j.assign(revenue=j.l_extendedprice * (1 - j.l_discount))
    r = j.groupby("n_name").revenue.sum().compute().reset_index()
    return r.sort_values("revenue", ascending=False)


def q6(read):
    li = read("lineitem", ["l_shipdate", "l_discount", "l_quantity", "l_extendedprice"])
    li = li[(li.l_shipdate >= D(1994, 1, 1)) & (li.l_shipdate < D(1995, 1, 1))
            & (li.l_discount >= 0.05) & (li.l_discount <= 0.07) & (li.l_quantity < 24)]
    rev = (li.l_extendedprice * li.l_discount).sum().compute()
    return pd.DataFrame({"revenue": [rev]})


def q10(read):
    c = read("customer", ["c_custkey", "c_name", "c_acctbal", "c_address", "c_phone",
                          "c_comment", "c_nationkey"])
    o = read("orders", ["o_orderkey", "o_custkey", "o_orderdate"])
    o = o[(o.o_orderdate >= D(1993, 10, 1)) & (o.o_orderdate < D(1994, 1, 1))]
    li = read("lineitem", ["l_orderkey", "l_extendedprice", "l_discount", "l_returnflag"])
    li = li[li.l_returnflag == "R"]
    n = read("nation", ["n_nationkey", "n_name"])
    j = li.merge(o, left_on="l_orderkey", right_on="o_orderkey")
    j = j.assign(revenue=j.l_extendedprice * (1 - j.l_discount))
    # c_custkey functionally determines the other grouping columns of the spec query
    rev = j.groupby("o_custkey").revenue.sum().reset_index()
    r = rev.merge(c, left_on="o_custkey", right_on="c_custkey").merge(
        n, left_on="c_nationkey", right_on="n_nationkey")
    r = r.nlargest(20, "revenue").compute()
    return r.sort_values("revenue", ascending=False)


def q18(read):
    li = read("lineitem", ["l_orderkey", "l_quantity"])
    big = li.groupby("l_orderkey").l_quantity.sum(split_out=True).reset_index()
    big = big[big.l_quantity > 300]
    o = read("orders", ["o_orderkey", "o_custkey", "o_orderdate", "o_totalprice"])
    c = read("customer", ["c_custkey", "c_name"])
    # sum(l_quantity) over the order's lineitems == the subquery's per-order sum
    j = big.merge(o, left_on="l_orderkey", right_on="o_orderkey").merge(
        c, left_on="o_custkey", right_on="c_custkey")
    r = j.compute().rename(columns={"l_quantity": "sum(l_quantity)"})
    return r.sort_values(["o_totalprice", "o_orderdate"], ascending=[False, True]).head(100)


QUERY_FNS = {"Q1": q1, "Q3": q3, "Q5": q5, "Q6": q6, "Q10": q10, "Q18": q18}


def main():
    ap = parse_args("dask")
    ap.add_argument("--blocksize", default="32MiB")
    a = ap.parse_args()
    data = os.path.abspath(a.data)
    # Outside the timing: the cluster (2 processes x 1 thread).
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    client = Client(cluster)
    try:
        def run():
            read = make_reader(data, a.blocksize)
            df = QUERY_FNS[a.query](read)[COLUMNS[a.query]]
            rows = [tuple(x.item() if hasattr(x, "item") else x for x in r)
                    for r in df.itertuples(index=False, name=None)]
            return list(df.columns), rows

        res = bench(f"dask-{dask.__version__}", a.query, a.runs, a.warmup, run)
        emit(res, a.query, a.out, a.show)
    finally:
        client.close()
        cluster.close()


if __name__ == "__main__":
    main()
