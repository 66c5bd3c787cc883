# Unit tests of layers (Check).
