"""A problem's data: raw pairs -> vocabulary and tokenized TFRecords in a data_dir (preparation),
TFRecords -> token-bucketed or packed batches (pipeline), and the scores of its outputs."""
