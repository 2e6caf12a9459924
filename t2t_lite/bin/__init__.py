"""Console scripts: thin shells that parse flags and call the library."""
import os

# Hide TensorFlow's INFO start-up lines (oneDNN, CPU features) unless the user asked for them.
# This runs before any CLI imports TensorFlow.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
