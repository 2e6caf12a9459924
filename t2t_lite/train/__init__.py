"""Training: `trainer.train(problem, hparams, data_dir, config)` is the one way in (the CLI, the
Python API and the tests call it). The loop (trainer), its options (train_config), one optimizer
step and one eval step (steps), the platform it runs on (distribute), the optimizer, the run's
schedule and log, pre-emption, and checkpoint averaging."""
