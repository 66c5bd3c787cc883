# libFuzzer harnesses (built with clang by make fuzz).
