# Job file, strategy, cluster environment, checkpoint format.
