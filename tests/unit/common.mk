# Unit tests of common (Check).
