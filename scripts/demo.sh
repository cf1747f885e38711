#!/usr/bin/env bash
# Set up, then fine-tune a small randomly initialised ERNIE on the sample reviews in data/ (offline),
# predict a few new reviews and evaluate on the test file. A few minutes on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=${1:-runs/demo}
py=.venv/bin/python
$py -m ernie_ft.classify --config tasks/sample_sentiment.yaml --output "$out" --overwrite
echo; echo "== predictions for data/predict.txt"
$py -m ernie_ft.classify predict --model "$out" --input data/predict.txt
echo; echo "== evaluation on data/sentiment_test.csv"
$py -m ernie_ft.evaluate --model "$out" --input data/sentiment_test.csv
echo; echo "== try it in a browser: $py -m ernie_ft serve --model $out   (then open http://127.0.0.1:8000/)"
