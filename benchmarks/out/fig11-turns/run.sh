# Fig. 11 on the CPU with the accumulator round-trip rule (docs/decisions/analytic-model.md), three draws of
# Gensor's walks as in fig11-chains/ (seed 0 here, 1 and 2 in seedN/).
cd "$(dirname "$0")/../../.."
python benchmarks/papers/model_fig11.py --out benchmarks/out/fig11-turns --work /tmp/fig11t --methods gensor,roller --rounds 3
for s in 1 2; do
  python benchmarks/papers/model_fig11.py --out benchmarks/out/fig11-turns/seed$s --work /tmp/fig11t$s --methods gensor,roller \
    --rounds 3 --seed $s
done
# two more draws, the same evening (seed3/, seed4/)
for s in 3 4; do
  python benchmarks/papers/model_fig11.py --out benchmarks/out/fig11-turns/seed$s --work /tmp/fig11t$s --methods gensor,roller \
    --rounds 3 --seed $s
done
