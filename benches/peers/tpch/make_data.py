"""Makes the TPC-H SF 1 Parquet files the benchmarks read (benches/RESULTS.md).

    cargo install tpchgen-cli && pip install duckdb
    python3 benches/peers/tpch/make_data.py /work/data/tpch

writes DIR/sf1-tpchgen (tpchgen-cli's own files: DECIMAL columns) and DIR/sf1-duckdb (the same
rows rewritten by DuckDB with every DECIMAL column as DOUBLE, as the peers' figures of the
Programs issue were measured on).
"""

import os
import subprocess
import sys

import duckdb

TABLES = ["customer", "lineitem", "nation", "orders", "part", "partsupp", "region", "supplier"]


def main(root: str) -> None:
    tpchgen = os.path.join(root, "sf1-tpchgen")
    rewritten = os.path.join(root, "sf1-duckdb")
    if not os.path.exists(os.path.join(tpchgen, "lineitem.parquet")):
        subprocess.run(
            ["tpchgen-cli", "parquet", "-s", "1", f"--output-dir={tpchgen}"], check=True
        )
    os.makedirs(rewritten, exist_ok=True)
    con = duckdb.connect()
    for table in TABLES:
        source = os.path.join(tpchgen, f"{table}.parquet")
        columns = con.execute(f"DESCRIBE SELECT * FROM '{source}'").fetchall()
        select = ", ".join(
            f'CAST("{name}" AS DOUBLE) AS "{name}"' if kind.startswith("DECIMAL") else f'"{name}"'
            for name, kind, *_ in columns
        )
        target = os.path.join(rewritten, f"{table}.parquet")
        con.execute(f"COPY (SELECT {select} FROM '{source}') TO '{target}' (FORMAT PARQUET)")
        print(target)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/work/data/tpch")
