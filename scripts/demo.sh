#!/usr/bin/env bash
# Set up, then fine-tune a small randomly initialised ERNIE on the sample reviews in data/ (offline),
# predict a few new reviews and evaluate on the test file. About a minute on 2 CPU cores once set up.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=${1:-runs/demo}
py=.venv/bin/python
$py -m ernie_ft classify --config tasks/sample_sentiment.yaml --output "$out" --overwrite
echo; echo "== predictions for data/predict.txt"
$py -m ernie_ft classify predict --model "$out" --input data/predict.txt
echo "note: this model starts from random weights and saw 240 sample reviews: it learnt their words, not" \
  "Chinese, so some predictions above are wrong; for real accuracy fine-tune a pretrained ERNIE" \
  "(--model ernie-3.0-medium-zh), see docs/results.md"
echo; echo "== evaluation on data/sentiment_test.csv"
$py -m ernie_ft evaluate --model "$out" --input data/sentiment_test.csv
echo; echo "== try it in a browser: $py -m ernie_ft serve --model $out   (then open http://127.0.0.1:8000/)"
