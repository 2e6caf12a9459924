"""Console scripts: thin shells that parse flags and call the library."""
import os

# Hide TensorFlow's INFO and WARNING start-up lines (oneDNN, CPU features, CUDA probing)
# unless the user set the level. The one place for all CLIs: this runs before any of them
# imports TensorFlow (`import t2t_lite` does not).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
