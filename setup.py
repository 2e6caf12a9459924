from setuptools import find_packages, setup

# The plug-in folders stay at the top of the repository (problems/, hparams/) but install
# inside the t2t_lite namespace: site-packages gets no top-level `problems` or `hparams`
# (names other projects use): problems/ is t2t_lite.problems and hparams/ is t2t_lite.hparams.
PLUGINS = {"t2t_lite.problems": "problems", "t2t_lite.hparams": "hparams"}

setup(
    name="t2t-lite",
    version="0.1.0",
    description="The Transformer of 'Attention Is All You Need' in TensorFlow 2 / Keras 3",
    python_requires=">=3.10",
    packages=find_packages(include=["t2t_lite", "t2t_lite.*"]) + list(PLUGINS),
    package_dir=PLUGINS,
    # What the product (t2t_lite/, problems/, hparams/) imports, plus the run-time-only ones
    # marked below; tests/test_packaging.py checks this list against the imports.
    install_requires=[
        "tensorflow>=2.18,<2.22",
        "tensorflow-text>=2.18,<2.22",
        "keras>=3.6",
        "numpy>=1.26",
        "tensorflow-datasets>=4.9",
        # Run time only: TFDS's builders import these at preparation time but do not declare
        # them.
        "importlib_resources>=5",
        "dm-tree>=0.1.8",
        # Run time only: tf.summary.scalar comes from it, and `tensorboard --logdir=<model_dir>`.
        "tensorboard>=2.18",
        "sacrebleu>=2.4",
        "sacremoses>=0.1",  # Moses tokenizer.perl, for the paper's tokenized BLEU.
        "sentencepiece>=0.2",
        "matplotlib>=3.7",
        "tqdm>=4.60",
        "optuna>=4.0",  # t2t-lite-tune's search, pruning and study storage.
    ],
    # gRPC clients of TF Serving also want `tensorflow-serving-api` (see README); not needed here.
    # keras-hub: only bench/train_throughput.py's comparison model uses it (and test_export
    # checks that an export does not load it). pytest-xdist: README's test command runs the
    # suite on three workers, a test file each (--dist loadfile keeps a file's fixtures in one).
    # ctranslate2: t2t-lite-export --format=ctranslate2 only (imported there, when asked for);
    # in the test extra too, so that CI runs its tests for real.
    extras_require={"test": ["pytest>=8", "pytest-xdist>=3", "keras-hub>=0.20",
                             "ctranslate2>=4.5,<5", "ai-edge-litert>=2.3"],
                    "bench": ["keras-hub>=0.20", "ctranslate2>=4.5,<5", "ai-edge-litert>=2.3"],
                    "ctranslate2": ["ctranslate2>=4.5,<5"],
                    "litert": ["ai-edge-litert>=2.3"]},
    entry_points={
        "console_scripts": [
            "t2t-lite-train=t2t_lite.bin.train:main",
            "t2t-lite-datagen=t2t_lite.bin.datagen:main",
            "t2t-lite-decode=t2t_lite.bin.decode:main",
            "t2t-lite-avg-checkpoints=t2t_lite.bin.avg_checkpoints:main",
            "t2t-lite-attention=t2t_lite.bin.attention:main",
            "t2t-lite-export=t2t_lite.bin.export:main",
            "t2t-lite-score=t2t_lite.bin.score:main",
            "t2t-lite-tune=t2t_lite.bin.tune:main",
        ],
    },
)
