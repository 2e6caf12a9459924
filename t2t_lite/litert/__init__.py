"""The LiteRT runtime: decoding an exported `.tflite` model (t2t-lite-export --format=litert)
with numpy, `ai_edge_litert` and sentencepiece only, no TensorFlow.

  from t2t_lite import litert
  texts, scores = litert.translate("exports/ende_litert", ["A man rides a horse."])

`LiteRTTranslator(export_dir)` opens an export once (export_dir.py reads and checks its files;
text.py tokenizes as the run's tokenizer does in the graph) and decodes lines as
translation.Translator does: the same outputs, scores, blank lines and truncation for the same
model. t2t-lite-decode --engine=litert and translate(..., engine="litert") call it.
"""
from t2t_lite.litert.exported import EXPORT_FILE, LiteRTError, is_export
from t2t_lite.litert.runtime import LiteRTTranslator, translate

__all__ = ["EXPORT_FILE", "LiteRTError", "LiteRTTranslator", "is_export", "translate"]
