"""Decoding a trained model: beam search (section 6.1), the search over a model, text in / text
out (translation), loading a run directory back (loading) and the SavedModel export."""
