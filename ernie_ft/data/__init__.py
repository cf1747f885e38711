"""Reading labelled files, datasets and their cache, windows over long texts, and batching."""
