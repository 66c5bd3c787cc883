# Unit tests of cuda (Check).
