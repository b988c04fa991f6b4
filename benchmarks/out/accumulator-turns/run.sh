# Each model's tasks whose top construction changes with the accumulator round-trip rule
# (docs/decisions/analytic-model.md), without and with, timed alone alternately (construct_change.py); one log each.
# first-draws/: the same comparison the same evening with the script's earlier draws (every task's walks from
# default_rng(0); Bert-small's dynamic set by first-draws/dyn_change.py, this script's --shapes since).
cd "$(dirname "$0")/../../.."
O=benchmarks/out/accumulator-turns
S="--shapes batch=1,4 --shapes seq=16,32,64,128,256,384"
for how in gensor roller; do
  python benchmarks/research/construct/construct_change.py benchmarks/common/dyn_models.py:bert_small $S --change accumulator-turns \
    --method $how > $O/bert-small-dyn-$how.log 2>&1
  for m in resnet50 mobilenetv2; do
    python benchmarks/research/construct/construct_change.py $m --change accumulator-turns --method $how > $O/$m-$how.log 2>&1
  done
done
