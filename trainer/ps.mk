# PServer mode on the trainer: PS client, CTR model.
