# Collective engine: backends, hierarchical, buckets, rendezvous.
