# Layer ops (linear, activations, softmax-xent, conv2d, pooling, norms).
