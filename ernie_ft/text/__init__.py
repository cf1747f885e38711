"""Text to token ids: normalisation, jieba + WordPiece, vocabulary extensions and scratch vocabularies."""

from ernie_ft.text.pipeline import PIPELINE_VERSION, SPECIAL_TOKENS, Encoding, TextPipeline, normalize_text

__all__ = ["PIPELINE_VERSION", "SPECIAL_TOKENS", "Encoding", "TextPipeline", "normalize_text"]
