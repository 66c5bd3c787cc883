# Tests of trainer/ (graph).
