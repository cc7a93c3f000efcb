"""What the mutated modules import of mutmut, in the server of `make mutation MUTATION_SCOPE=models`
(see ../sitecustomize.py): mutmut.mutation.trampoline alone."""
