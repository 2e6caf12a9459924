"""The run directory (model_dir) a training run leaves behind: the names and formats of its files
(run_files), its checkpoints (checkpoints) and which trainer may write it (lease). Decoding,
averaging and export read it back through the same modules."""
