"""The Transformer of the paper's section 3, and what training and decoding compute with it:
attention, embeddings, dropout, the encoder and decoder stacks, the loss, compute precisions.
Imports nothing above itself (see docs/design.md)."""
