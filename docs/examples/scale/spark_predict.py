"""Answer a Parquet file's "text" column with Spark, through a pandas UDF:
spark-submit spark_predict.py MODEL_DIR INPUT.parquet OUTPUT_DIR"""

import sys

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql.functions import pandas_udf

from ernie_ft import Predictor

model_dir, source, target = sys.argv[1:4]
spark = SparkSession.builder.appName("sentiment").getOrCreate()
predictor = Predictor(model_dir, device="cpu", threads=1)  # pickled into the UDF: each Python worker loads it once


@pandas_udf("label string, probs map<string, double>")
def sentiment(texts: pd.Series) -> pd.DataFrame:
    return predictor(pd.DataFrame({"text": texts}))[["label", "probs"]]


reviews = spark.read.parquet(source)  # a "text" column, here with an "id"
answered = reviews.withColumn("answer", sentiment("text")).select("*", "answer.*").drop("answer")
answered.write.parquet(target)  # id, text, label, probs (a map column)
