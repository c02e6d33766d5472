#!/usr/bin/env bash
# Compare the result CSVs of a run_all.sh run with reference answers.
#   ./check_run.sh RUN_OUTDIR ANSWERS_DIR [IGNORE_COLS]
# e.g. ./check_run.sh runs/sf1-duckdb-2 answers/sf1 c_address,c_comment
# (DuckDB-dbgen data differ from tpchgen/official data only in address/comment text.)
set -u
here="$(cd "$(dirname "$0")" && pwd)"
run="$1"; ans="$2"; ign="${3:-}"; rc=0
for f in "$run"/*-Q*.csv; do
  q="$(basename "$f" .csv)"; q="${q##*-}"; q="$(echo "$q" | tr Q q)"
  python3 "$here/compare_csv.py" "$ans/$q.csv" "$f" --abs 0.005001 --ignore-cols "$ign" || rc=1
done
exit $rc
