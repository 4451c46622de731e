# Sourced by the trainer benchmarks that read `train --json` (c10d_vacate_bench.sh,
# c10d_grow_bench.sh): switch_report LOG JSON prints each switch's line from LOG and, from JSON,
# its pause against the two floors the same run measured (the bare exchange of the switch's own
# bytes with the same peers right after its commit, and the bound from one link).
switch_report() {
  grep -E '^(notice|switch)' "$1"
  awk -F': ' '/"[a-z_0-9]+": [-0-9."]/ {
      k = $1; gsub(/[" ]/, "", k); val = $2; gsub(/[",]/, "", val); sub(/ +$/, "", val); v[k] = val }
    /^    }/ { printf "   before step %d: pause %.3f s, bare exchange of its bytes %.3f s (pause / exchange %.2f), one-link bound %.3f s (%.2f GB/s, %s; pause / bound %.2f), %d MB in at the busiest rank\n",
                 v["step"], v["pause_s"], v["exchange_s"], (v["exchange_s"] > 0 ? v["pause_s"] / v["exchange_s"] : 0),
                 v["lower_bound_s"], v["link_bytes_per_s"] / 1e9, v["link_path"],
                 (v["lower_bound_s"] > 0 ? v["pause_s"] / v["lower_bound_s"] : 0), v["max_bytes_received"] / 1e6 }' \
    "$2"
}
