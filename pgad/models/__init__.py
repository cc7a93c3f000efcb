"""Everything about a trained model, in one room: the objective of its model and loss (objective.py), the starting
weights (initial.py), standardised columns (standardize.py), the optimizers that fit it (descent.py), and the
catalog of stored models with their scoring functions (catalog.py). pgad/ keeps the stages of a call."""
