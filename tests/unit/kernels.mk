# Unit tests of kernels/ (Check).
