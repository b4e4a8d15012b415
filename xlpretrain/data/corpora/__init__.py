"""Where a run's text comes from: the corpus backends (folders of text, TFDS datasets, a
prepared store) behind one pair of protocols, what they share (`sources`), the seeded share of
their lines held out for evaluation, and the run's corpus as its config names it (`corpus`)."""
