# Data readers, the training loop, checkpoints, flotilla-trainer main.
