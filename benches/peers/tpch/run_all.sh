#!/usr/bin/env bash
# Run Q1,Q3,Q5,Q6,Q10,Q18 on DuckDB, DataFusion and Dask against DIR and print
# a table of medians (seconds).
#
#   ./run_all.sh DIR [RUNS] [WARMUP]        (defaults: 3 timed runs, 1 warm-up)
#
# Env: ENGINES="duckdb datafusion dask" (subset allowed), NICE="nice -n 10"
#      (set NICE= to run at normal priority), OUTDIR=<dir for logs + result CSVs>
# Per-run logs and each engine's result CSVs go to $OUTDIR (default
# ./runs/<basename DIR>-<timestamp>); results.tsv there holds the table and
# noise.tsv how many cores OTHER processes used on average during each
# invocation (0 = quiet machine; this box has 2 cores), measured by noise.py.
# Check results with: ./check_run.sh $OUTDIR answers/sf1 [c_address,c_comment]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
DIR="${1:?usage: run_all.sh DIR [RUNS] [WARMUP]}"
RUNS="${2:-3}"
WARMUP="${3:-1}"
ENGINES="${ENGINES:-duckdb datafusion dask}"
NICE="${NICE-nice -n 10}"
QUERIES="Q1 Q3 Q5 Q6 Q10 Q18"
OUTDIR="${OUTDIR:-$here/runs/$(basename "$DIR")-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUTDIR"
TSV="$OUTDIR/results.tsv"
NTSV="$OUTDIR/noise.tsv"
hdr="engine"
for q in $QUERIES; do hdr="$hdr\t$q"; done
printf "$hdr\n" > "$TSV"
printf "$hdr\n" > "$NTSV"

for e in $ENGINES; do
  line="$e"; nline="$e"
  for q in $QUERIES; do
    log="$OUTDIR/$e-$q.log"
    echo "== $e $q" >&2
    if $NICE python3 "$here/noise.py" python3 "$here/tpch_$e.py" --data "$DIR" --query "$q" \
         --runs "$RUNS" --warmup "$WARMUP" --out "$OUTDIR/$e-$q.csv" > "$log" 2>&1; then
      med="$(sed -n 's/^RESULT .* median=\([0-9.]*\) .*/\1/p' "$log")"
      grep -E ' (warmup|run) [0-9]+: ' "$log" >&2 || true
    else
      med="ERR"
      tail -5 "$log" >&2
    fi
    noise="$(sed -n 's/^NOISE .*others_cores=\([0-9.]*\) .*/\1/p' "$log")"
    line="$line\t${med:-ERR}"; nline="$nline\t${noise:-?}"
  done
  printf "$line\n" >> "$TSV"
  printf "$nline\n" >> "$NTSV"
done

echo
echo "data: $DIR   runs: $RUNS (median) after $WARMUP warm-up   logs: $OUTDIR"
column -t -s $'\t' "$TSV"
echo
echo "other processes' average CPU use during each invocation (cores, of $(nproc)):"
column -t -s $'\t' "$NTSV"
