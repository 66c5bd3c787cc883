# trainer/: flotilla-trainer and its internals (readers, models, loop,
# PS client, collective engine).
