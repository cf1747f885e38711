"""Answer a Parquet file's "text" column with Ray Data on this machine, two actors each loading the model once:
python ray_predict.py MODEL_DIR INPUT.parquet OUTPUT_DIR"""

import sys

import ray

from ernie_ft import Predictor

model_dir, source, target = sys.argv[1:4]
actors = 2
ray.init(num_cpus=actors + 1, include_dashboard=False)  # a CPU per actor and one for Ray's read and write tasks
reviews = ray.data.read_parquet(source)  # a "text" column, here with an "id"
reviews = reviews.repartition(2 * actors)  # a file is read as one block, which one actor would answer alone
answered = reviews.map_batches(
    Predictor,
    fn_constructor_kwargs={"model_dir": model_dir, "device": "cpu", "threads": 1},
    batch_size=16,
    batch_format="pandas",
    concurrency=actors,
    num_cpus=1,  # the actor's CPUs, as many as its threads
)
answered.write_parquet(target)  # id, text, label, probs (a struct column)
