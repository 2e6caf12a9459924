"""Console scripts: thin shells that parse flags and call the library."""
