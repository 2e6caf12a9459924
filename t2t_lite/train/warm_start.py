"""Fine-tuning: a new run that starts from another run's weights, not its optimizer state or step
(fairseq's --restore-file --reset-optimizer, OpenNMT-tf's --checkpoint_path, tensor2tensor's
--warm_start_from).

The source is a run directory (its newest checkpoint that reads; its best/ is one too) or a
checkpoint prefix. Its architecture must be the new run's. Its vocabulary may differ, as
OpenNMT-tf's update_vocab allows: the embedding rows of the tokens both vocabularies share
(the same piece) are carried over, and the new run's other tokens keep the rows a new model
draws. The embedding is also the pre-softmax projection (tied, section 3.4), so the output
layer follows the same mapping. Every other weight is copied as it is.
"""
import dataclasses
import os

import numpy as np
import tensorflow as tf

from t2t_lite.decode import loading
from t2t_lite.errors import T2TLiteError
from t2t_lite.train.train_config import TrainerError


# What the weights' shapes and meaning depend on (max_length too, with learned positions).
ARCHITECTURE = ("num_layers", "decoder_depth", "d_model", "d_ff", "num_heads", "key_depth",
                "value_depth", "norm_type", "position_encoding", "source_pointer")


@dataclasses.dataclass
class Source:
  """A loaded source run: its model (the averaged weights when it kept them) and vocabulary,
  and the vocabulary of the run it starts (`new_pieces`, id order)."""
  path: str
  checkpoint: str
  model: object
  pieces: list
  new_pieces: list


def load_source(path, hparams, new_pieces):
  """The run (or checkpoint) at `path`, checked against `hparams` -> Source for a new run of
  vocabulary `new_pieces`. A missing or damaged run, or one of another architecture, is a
  one-line T2TLiteError."""
  directory, prefix = path, None
  if not tf.io.gfile.isdir(path):  # a checkpoint prefix: its directory's run files
    if not tf.io.gfile.exists(path + ".index"):
      raise TrainerError(f"--init_from {path}: neither a run directory nor a checkpoint (no "
                         f"{path}.index)")
    directory, prefix = os.path.dirname(path) or ".", path
  try:
    loaded = loading.load(directory, prefix, precision="none")  # float32 weights, as saved
  except T2TLiteError as e:
    raise TrainerError(f"--init_from {path}: {e}") from None
  names = list(ARCHITECTURE) + (["max_length"] if hparams.position_encoding == "learned" else [])
  for name in names:
    theirs, ours = getattr(loaded.hparams, name), getattr(hparams, name)
    if theirs != ours:
      raise TrainerError(f"--init_from {path}: its model has {name}={theirs!r}, this run's "
                         f"{ours!r}; fine-tuning needs the same architecture")
  return Source(path, loaded.checkpoint, loaded.model, loaded.tokenizer.pieces(), new_pieces)


def apply(model, source):
  """Sets `model`'s weights (the new run's) to the source's -> a line saying what was carried
  over."""
  pieces = source.new_pieces
  old_rows = {piece: i for i, piece in enumerate(source.pieces)}
  new_embedding = model.embedding.embeddings
  for ours, theirs in zip(model.trainable_variables, source.model.trainable_variables):
    if ours is not new_embedding:
      ours.assign(theirs)
  table = new_embedding.numpy()  # [V_new, D]: a new model's rows where no piece is shared
  old_table = source.model.embedding.embeddings.numpy()  # [V_old, D]
  shared = [(i, old_rows[p]) for i, p in enumerate(pieces) if p in old_rows]
  if shared:
    new_ids, old_ids = (np.array(ids) for ids in zip(*shared))
    table[new_ids] = old_table[old_ids]
  new_embedding.assign(table)
  same = pieces == source.pieces
  return (f"initialised from {source.checkpoint} (step 0 of a new run; its optimizer state is "
          f"not used); vocabulary: " + ("the same" if same else
          f"{len(shared)} of {len(pieces)} tokens shared with its {len(source.pieces)}, the "
          f"other {len(pieces) - len(shared)} new"))

