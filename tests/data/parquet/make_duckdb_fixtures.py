"""Writes the DuckDB test fixtures of Flint's Parquet source, tests/parquet.rs (run from this
directory; needs `pip install duckdb`).

The lineitem fixtures are the first 4,500 rows of DuckDB's SF0.01 lineitem (from the project's
data directory), once with prices as DECIMAL(15,2) and once as DOUBLE, in row groups of 2,048 rows (DuckDB rounds ROW_GROUP_SIZE up to its vector size)
so that splits have something to split. `types.parquet` has one column per type mapping the reader
supports, nulls, out-of-range values, and columns the reader cannot read (to show projection skips
them).
"""
import sys
import duckdb

source = sys.argv[1] if len(sys.argv) > 1 else "/work/data/tpch/sf0.01-duckdb/lineitem.parquet"
con = duckdb.connect()
con.sql(f"CREATE TABLE li AS SELECT * FROM read_parquet('{source}') ORDER BY l_orderkey, l_linenumber LIMIT 4500")

decimal_cols = ["l_quantity", "l_extendedprice", "l_discount", "l_tax"]
def select(decimal: bool) -> str:
    cols = []
    for name, _type in [(r[0], r[1]) for r in con.sql("DESCRIBE li").fetchall()]:
        if name in decimal_cols:
            cols.append(f"CAST({name} AS DECIMAL(15,2)) AS {name}" if decimal else f"CAST({name} AS DOUBLE) AS {name}")
        else:
            cols.append(name)
    return ", ".join(cols)

con.sql(f"COPY (SELECT {select(True)} FROM li) TO 'duckdb_lineitem_decimal.parquet' (FORMAT parquet, ROW_GROUP_SIZE 2048)")
con.sql(f"COPY (SELECT {select(False)} FROM li) TO 'duckdb_lineitem_double.parquet' (FORMAT parquet, ROW_GROUP_SIZE 2048, COMPRESSION zstd)")

con.sql("""
COPY (
  SELECT * FROM (VALUES
    (1, 10::INTEGER, 10000000000::BIGINT, 1.5::DOUBLE, 12.34::DECIMAL(4,2), 1234567.89::DECIMAL(15,2),
     123456789012345678901234.5678::DECIMAL(38,4), DATE '1998-09-02', 'hello', 'A', true,
     42::INTEGER, 'R', '1995-03-15', '12.50', -5::INTEGER, 3000000000::BIGINT, 7::UINTEGER, 100::TINYINT, 2.5::FLOAT,
     'ab'::BLOB, [1, 2], {'a': 1}, INTERVAL 1 DAY, 'AB'),
    (2, -20::INTEGER, -1::BIGINT, -0.25::DOUBLE, -0.05::DECIMAL(4,2), -0.01::DECIMAL(15,2),
     -1.0001::DECIMAL(38,4), DATE '1970-01-01', 'wörld', 'N', false,
     NULL, 'N', 'not a date', 'x1', 5::INTEGER, 5::BIGINT, 4000000000::UINTEGER, -1::TINYINT, -1.0::FLOAT,
     ''::BLOB, [], {'a': 2}, INTERVAL 2 DAY, 'B'),
    (3, 0::INTEGER, 0::BIGINT, 0.0::DOUBLE, 0.00::DECIMAL(4,2), 100::DECIMAL(15,2),
     0::DECIMAL(38,4), DATE '1969-12-31', '', 'é', NULL,
     7::INTEGER, 'A', '2000-02-29', '-3', 0::INTEGER, 0::BIGINT, 0::UINTEGER, 0::TINYINT, 0.0::FLOAT,
     NULL, NULL, NULL, NULL, 'C')
  ) t(id, i32, i64, f64, dec_4_2, dec_15_2, dec_38_4, date, text, flag, bool,
      maybe_i32, letter, date_text, decimal_text, neg_i32, big_i64, u32, i8, f32,
      blob, list, struct, interval, two_letters)
) TO 'types.parquet' (FORMAT parquet)
""")
# A codec Flint leaves out of its build of `parquet` (GZIP), for the error test.
con.sql("""
COPY (SELECT 1::BIGINT AS l_orderkey, 2.5::DOUBLE AS l_extendedprice, 0.1::DOUBLE AS l_discount,
             DATE '1998-09-02' AS l_shipdate)
TO 'duckdb_gzip.parquet' (FORMAT parquet, COMPRESSION gzip)
""")

for f in ["duckdb_lineitem_decimal.parquet", "duckdb_lineitem_double.parquet", "types.parquet", "duckdb_gzip.parquet"]:
    groups = con.sql(f"SELECT count(DISTINCT row_group_id) FROM parquet_metadata('{f}')").fetchall()[0]
    print(f, "row groups:", groups[0])
