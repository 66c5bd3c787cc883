# Models (logreg, mlp, cnn, plugin) and recompute.
