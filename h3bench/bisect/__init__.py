"""h3bench bisect: from a regression to its culprit engine commit."""
